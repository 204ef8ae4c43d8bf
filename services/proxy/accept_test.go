package proxy

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"switchyard.dev/services/proxy/internal/gwerror"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/jsonfield"
	"switchyard.dev/shared/provider"
)

// readBodyOld is the request body's reading as the proxy did it before
// readBody, a walk per field, plus the walk (*request).run made for
// stream_options: the oracle readBody must agree with.
func readBodyOld(body []byte, op provider.Op) (p parsed, berr *bodyError) {
	// The validation and the key check, as readBody's one pass makes them
	// (jsonfield's FuzzStrict holds them to the separate passes of old).
	if _, err := jsonfield.Strict(body, readFields); err != nil {
		return parsed{}, bodyErrorOf(err)
	}
	model, ok := jsonfield.String(body, "model")
	if !ok || model == "" {
		return parsed{}, &bodyError{gwerror.MissingModel, "the request body must name a model"}
	}
	if !utf8.ValidString(model) {
		return parsed{}, &bodyError{gwerror.MissingModel, "the model name is not valid UTF-8"}
	}
	switch op {
	case provider.OpChat:
		if v, _, _, found := jsonfield.Find(body, "messages"); !found || len(v) == 0 || v[0] != '[' {
			return parsed{}, &bodyError{gwerror.InvalidRequest, "`messages` must be an array of messages"}
		}
	case provider.OpEmbeddings, provider.OpModerations:
		if v, _, _, found := jsonfield.Find(body, "input"); !found || string(v) == "null" {
			return parsed{}, &bodyError{gwerror.InvalidRequest, "`input` must be a string, an array of strings or an array of token ids"}
		}
	case provider.OpCompletions:
		if v, _, _, found := jsonfield.Find(body, "prompt"); !found || string(v) == "null" {
			return parsed{}, &bodyError{gwerror.InvalidRequest, "`prompt` must be a string, an array of strings or an array of token ids"}
		}
	case provider.OpImages:
		if v, _, _, found := jsonfield.Find(body, "prompt"); !found || len(v) == 0 || v[0] != '"' {
			return parsed{}, &bodyError{gwerror.InvalidRequest, "`prompt` must be a string"}
		}
	case provider.OpSpeech:
		if v, _, _, found := jsonfield.Find(body, "input"); !found || len(v) == 0 || v[0] != '"' {
			return parsed{}, &bodyError{gwerror.InvalidRequest, "`input` must be the text to speak"}
		}
	case provider.OpResponses:
		if v, _, _, found := jsonfield.Find(body, "input"); found && string(v) != "null" && (len(v) == 0 || (v[0] != '"' && v[0] != '[')) {
			return parsed{}, &bodyError{gwerror.InvalidRequest, "`input` must be a string or an array of input items"}
		}
	case provider.OpCountTokens:
		if v, _, _, found := jsonfield.Find(body, "messages"); !found || len(v) == 0 || v[0] != '[' {
			return parsed{}, &bodyError{gwerror.InvalidRequest, "`messages` must be an array of messages"}
		}
	}
	stream := false
	if v, _, _, found := jsonfield.Find(body, "stream"); found {
		switch string(v) {
		case "true":
			stream = op == provider.OpChat || op == provider.OpCompletions || op == provider.OpResponses
		case "false", "null":
		default:
			return parsed{}, &bodyError{gwerror.InvalidRequest, "`stream` must be a boolean"}
		}
	}
	p = parsed{model: model, stream: stream}
	if stream { // (*request).run, for an OpenAI-format stream
		if so, _, _, ok := jsonfield.Find(body, "stream_options"); ok {
			p.callerUsage = jsonfield.Bool(so, "include_usage")
		}
	}
	return p, nil
}

// streamBodyOld is an OpenAI-format chat request's upstream body as
// bodyFor built it before Rewrite: streamOptionsFor's walks and copies,
// then the model renamed.
func streamBodyOld(a *provider.Adapter, body []byte, stream, callerAsked bool, model, upstream string) []byte {
	if stream {
		switch {
		case a.RejectsStreamOptions():
			if _, _, _, ok := jsonfield.Find(body, "stream_options"); ok {
				body = jsonfield.Delete(make([]byte, 0, len(body)), body, "stream_options")
			}
		case a.StreamUsageOption() && !callerAsked:
			so, _, _, ok := jsonfield.Find(body, "stream_options")
			if !ok || len(so) == 0 || so[0] != '{' {
				so = []byte("{}")
			}
			opts := jsonfield.SetRaw(make([]byte, 0, len(so)+24), so, "include_usage", []byte("true"))
			body = jsonfield.SetRaw(make([]byte, 0, len(body)+len(opts)+20), body, "stream_options", opts)
		}
	}
	if upstream == model {
		return body
	}
	return jsonfield.SetString(make([]byte, 0, len(body)+len(upstream)), body, "model", upstream)
}

var bodyAdapters = []*provider.Adapter{
	provider.New("openai", "", "", nil),
	provider.New("mistral", "", "", nil),
	provider.New("azure", "", "2024-06-01", nil),
	provider.New("azure", "", "2024-10-21", nil),
}

// streamBodyNew is bodyFor's body for a chat request to a.
func streamBodyNew(a *provider.Adapter, body []byte, stream, callerUsage bool, model, upstream string) []byte {
	r := &request{ep: epChat, body: body, model: model, stream: stream, use: usageNote{callerUsage: callerUsage}}
	out, err := r.bodyFor(&route.Step{Provider: &route.Provider{Name: "p", Adapter: a}, Upstream: upstream})
	if err != nil {
		panic(err)
	}
	return out
}

func sameParse(p1 parsed, e1 *bodyError, p2 parsed, e2 *bodyError) bool {
	if (e1 == nil) != (e2 == nil) || e1 != nil && *e1 != *e2 {
		return false
	}
	return p1 == p2
}

var readBodySeeds = []string{
	`{"model":"bench","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"a","stream":true,"stream_options":{"include_usage":true},"messages":[]}`,
	`{"model":"a","stream":true,"stream_options":{"include_usage":false,"x":1},"messages":[]}`,
	`{"model":"a","stream":true,"stream_options":null,"prompt":"p"}`,
	`{"mod\u0065l":"g\u006dodel","str\u0065am":true,"messages":[],"input":"x","prompt":null}`,
	`{"model":"a","Model":"b","STREAM":true}`,
	`{"model":"a","stream":"yes","messages":[]}`,
	`{"model":"a","messages":{}}`,
	`{"model":"","messages":[]}`,
	`{"model":"\ud800","messages":[]}`,
	`{"model":7,"messages":[]}`,
	` { "model" : "m" , "input" : [ 1 , 2 ] , "stream" : null } `,
	`[{"model":"a"}]`,
	`{"model":"a"`,
}

func TestReadBody(t *testing.T) {
	for _, s := range readBodySeeds {
		for op := provider.Op(0); op <= provider.OpTranscriptions; op++ {
			p, berr := readBody([]byte(s), op)
			po, bo := readBodyOld([]byte(s), op)
			if !sameParse(p, berr, po, bo) {
				t.Errorf("readBody(%s, %d) = %+v %v, the old way %+v %v", s, op, p, berr, po, bo)
			}
		}
	}
	p, berr := readBody([]byte(readBodySeeds[1]), provider.OpChat)
	if berr != nil || p != (parsed{model: "a", stream: true, callerUsage: true}) {
		t.Errorf("readBody = %+v, %v", p, berr)
	}
	body := []byte(readBodySeeds[0])
	if n := testing.AllocsPerRun(100, func() { _, _ = readBody(body, provider.OpChat) }); n > 1 {
		t.Errorf("readBody allocates %v times (the model name only)", n)
	}
}

func TestStreamBody(t *testing.T) {
	for _, s := range readBodySeeds {
		for _, a := range bodyAdapters {
			for _, up := range []string{"a", "up-model"} {
				for _, asked := range []bool{false, true} {
					got := streamBodyNew(a, []byte(s), true, asked, "a", up)
					want := streamBodyOld(a, []byte(s), true, asked, "a", up)
					if string(got) != string(want) {
						t.Errorf("%s (%s, %s, asked %v): %s, the old way %s", s, a.Type(), up, asked, got, want)
					}
				}
			}
		}
	}
}

// FuzzReadBody: readBody's one walk reads what the old walks per field
// read, with the same errors, for every op.
func FuzzReadBody(f *testing.F) {
	for _, s := range readBodySeeds {
		f.Add([]byte(s), uint8(provider.OpChat))
		f.Add([]byte(s), uint8(provider.OpEmbeddings))
		f.Add([]byte(s), uint8(provider.OpResponses))
		f.Add([]byte(s), uint8(provider.OpCompletions))
	}
	f.Fuzz(func(t *testing.T, body []byte, op uint8) {
		o := provider.Op(op % (uint8(provider.OpTranscriptions) + 1))
		p, berr := readBody(body, o)
		po, bo := readBodyOld(body, o)
		if !sameParse(p, berr, po, bo) {
			t.Fatalf("readBody(%q, %d) = %+v %v, the old way %+v %v", body, o, p, berr, po, bo)
		}
	})
}

// FuzzStreamBody: bodyFor's one-pass body for an OpenAI-format chat
// request (include_usage and the model in one Rewrite) is byte for byte
// the old one, for each kind of OpenAI-format provider.
func FuzzStreamBody(f *testing.F) {
	for _, s := range readBodySeeds {
		f.Add([]byte(s), "up-model", uint8(0), true, false)
		f.Add([]byte(s), "", uint8(1), true, true)
		f.Add([]byte(s), "q\"\\\n", uint8(2), false, false)
	}
	f.Fuzz(func(t *testing.T, body []byte, upstream string, which uint8, stream, asked bool) {
		a := bodyAdapters[int(which)%len(bodyAdapters)]
		model := "a"
		if p, berr := readBody(body, provider.OpChat); berr == nil {
			model = p.model
		}
		if upstream == "" {
			upstream = model
		}
		got := streamBodyNew(a, body, stream, asked, model, upstream)
		want := streamBodyOld(a, body, stream, asked, model, upstream)
		if string(got) != string(want) {
			t.Fatalf("%s %q: %s, the old way %s", a.Type(), upstream, got, want)
		}
	})
}

// BenchmarkBodyPasses: the JSON passes of a request's path, the old way
// and the new: reading a small chat stream request (parse) and its
// upstream body for OpenAI with the model renamed (stream body). The
// answer's checks are shared/provider's BenchmarkCheckAnswer.
func BenchmarkBodyPasses(b *testing.B) {
	req := []byte(`{"model":"bench","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	openai := bodyAdapters[0]
	r := &request{ep: epChat, body: req, model: "bench", stream: true}
	step := &route.Step{Provider: &route.Provider{Name: "p", Adapter: openai}, Upstream: "gpt-4o-mini"}
	for _, bm := range []struct {
		name     string
		old, new func()
	}{
		{"parse",
			func() { _, _ = readBodyOld(req, provider.OpChat) },
			func() { _, _ = readBody(req, provider.OpChat) }},
		{"stream body",
			func() { streamBodyOld(openai, req, true, false, "bench", "gpt-4o-mini") },
			func() { _, _ = r.bodyFor(step) }},
	} {
		b.Run(bm.name+"/old", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bm.old()
			}
		})
		b.Run(bm.name+"/new", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bm.new()
			}
		})
	}
}

// TestCompressedBodies: a compressed body is decoded, never past
// limits.max_body_bytes (the server's limit counts the bytes as sent, and
// a few kilobytes of gzip expand to gigabytes); an encoding the gateway
// does not decode is refused; a passthrough body goes upstream as sent,
// with its Content-Encoding.
func TestCompressedBodies(t *testing.T) {
	f := newFixture(t, func(c *config.Config) { c.Limits.MaxBodyBytes = 64 << 10 })
	gz := func(s string) string {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, _ = io.WriteString(w, s)
		_ = w.Close()
		return b.String()
	}
	bomb := gz(`{"model":"demo-chat","messages":[{"role":"user","content":"` + strings.Repeat(" ", 8<<20) + `"}]}`)
	if len(bomb) > 64<<10 {
		t.Fatalf("the bomb is %d bytes compressed", len(bomb))
	}
	before := len(f.openai.Calls())
	status, _, body := f.call(t, "/v1/chat/completions", bomb, "Content-Encoding", "gzip")
	if status != 413 || errorCode(t, body) != gwerror.RequestTooLarge {
		t.Errorf("8 MiB once decoded: %d %s", status, body)
	}
	if n := len(f.openai.Calls()) - before; n != 0 {
		t.Errorf("%d upstream calls for a refused body", n)
	}
	status, _, body = f.call(t, "/v1/chat/completions", gz(chatBody), "Content-Encoding", "gzip")
	if status != 200 {
		t.Fatalf("a gzipped body: %d %s", status, body)
	}
	if c := f.openai.Calls()[len(f.openai.Calls())-1]; !json.Valid(c.Body) || c.Header.Get("Content-Encoding") != "" {
		t.Errorf("upstream got %q with Content-Encoding %q, want the decoded JSON", c.Body, c.Header.Get("Content-Encoding"))
	}
	if status, _, body = f.call(t, "/v1/chat/completions", chatBody, "Content-Encoding", "compress"); status != 415 || errorCode(t, body) != gwerror.UnsupportedEncoding {
		t.Errorf("Content-Encoding compress: %d %s", status, body)
	}
	if status, _, body = f.call(t, "/v1/chat/completions", "not gzip", "Content-Encoding", "gzip"); status != 400 || errorCode(t, body) != gwerror.InvalidRequest {
		t.Errorf("a body that does not decode: %d %s", status, body)
	}
	zipped := gz(`{"input":"x","model":"text-embedding-3-small"}`)
	ptCall(t, f, "POST", "/fake-openai/embeddings", zipped, "Content-Encoding", "gzip", "Content-Type", "application/json")
	if c := f.openai.Calls()[len(f.openai.Calls())-1]; string(c.Body) != zipped || c.Header.Get("Content-Encoding") != "gzip" {
		t.Errorf("passthrough upstream got %q with Content-Encoding %q, want the body as sent", c.Body, c.Header.Get("Content-Encoding"))
	}
}

// A model name longer than maxModelName is refused before routing, in the
// endpoint's format: a caller's name reaches hold ids, logs and bundles,
// and a long one (unlisted models are sent as named) once made the hold
// store's KV key too long for NATS.
func TestModelNameLimit(t *testing.T) {
	f := newFixture(t, func(c *config.Config) { c.Providers[0].AllowUnlistedModels = true })
	long := "fake-openai/" + strings.Repeat("m.", maxModelName)
	fits := "fake-openai/" + strings.Repeat("m", maxModelName-len("fake-openai/"))
	form := func(model string) string {
		return "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n" + model + "\r\n" +
			"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nxx\r\n--b--\r\n"
	}
	tests := []struct {
		name, path, body, contentType string
		status                        int
		anthropic                     bool
	}{
		{"chat", "/v1/chat/completions", `{"model":"` + long + `","messages":[{"role":"user","content":"hi"}]}`, "", 400, false},
		{"messages", "/v1/messages", `{"model":"` + long + `","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "", 400, true},
		{"transcription form", "/v1/audio/transcriptions", form(long), "multipart/form-data; boundary=b", 400, false},
		{"at the limit", "/v1/chat/completions", `{"model":"` + fits + `","messages":[{"role":"user","content":"hi"}]}`, "", 200, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(f.openai.Calls())
			var hdr []string
			if tt.contentType != "" {
				hdr = []string{"Content-Type", tt.contentType}
			}
			status, _, body := f.call(t, tt.path, tt.body, hdr...)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %.300s", status, tt.status, body)
			}
			if status == 200 {
				return
			}
			if code := errorCode(t, body); code != gwerror.InvalidRequest {
				t.Errorf("code %q, want %s: %s", code, gwerror.InvalidRequest, body)
			}
			if m := decode(t, body); tt.anthropic != (m["type"] == "error") {
				t.Errorf("not in the endpoint's format: %s", body)
			}
			if n := len(f.openai.Calls()) - before; n != 0 {
				t.Errorf("%d upstream calls for a refused model name", n)
			}
			if len(body) > 1024 {
				t.Errorf("the error carries the name: %d bytes", len(body))
			}
		})
	}
}

// TestBodyInvalidTextAndNumbers: a string that is not valid UTF-8 (in a
// message's content) and a token limit no parser reads as meant
// (max_tokens 1e400) are refused with 400 invalid_request naming the
// field, in the endpoint's format, before anything goes upstream. A lone
// surrogate escape is valid JSON and is forwarded as written.
func TestBodyInvalidTextAndNumbers(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name, path, body, field string
		anthropic               bool
	}{
		{"chat content", "/v1/chat/completions", "{\"model\":\"demo-model\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\xff\"}]}", "messages[0].content", false},
		{"messages content", "/v1/messages", "{\"model\":\"demo-model\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"caf\xc3\"}]}]}", "messages[0].content[0].text", true},
		{"max_tokens 1e400", "/v1/chat/completions", `{"model":"demo-model","max_tokens":1e400,"messages":[{"role":"user","content":"hi"}]}`, "max_tokens", false},
		{"max_tokens past int64", "/v1/messages", `{"model":"demo-model","max_tokens":99999999999999999999,"messages":[{"role":"user","content":"hi"}]}`, "max_tokens", true},
		{"max_completion_tokens", "/v1/chat/completions", `{"model":"demo-model","max_completion_tokens":-1e309,"messages":[{"role":"user","content":"hi"}]}`, "max_completion_tokens", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(f.openai.Calls())
			status, _, body := f.call(t, tt.path, tt.body)
			if status != 400 {
				t.Fatalf("status %d, want 400: %.300s", status, body)
			}
			if code := errorCode(t, body); code != gwerror.InvalidRequest {
				t.Errorf("code %q, want %s: %s", code, gwerror.InvalidRequest, body)
			}
			m := decode(t, body)
			if tt.anthropic != (m["type"] == "error") {
				t.Errorf("not in the endpoint's format: %s", body)
			}
			if msg, _ := m["error"].(map[string]any)["message"].(string); !strings.Contains(msg, "`"+tt.field+"`") {
				t.Errorf("the message does not name %s: %s", tt.field, body)
			}
			if n := len(f.openai.Calls()) - before; n != 0 {
				t.Errorf("%d upstream calls for a refused body", n)
			}
		})
	}
	for _, body := range []string{
		`{"model":"demo-model","max_tokens":1000000,"messages":[{"role":"user","content":"lone \udc00 surrogate"}]}`,
		`{"model":"demo-model","max_tokens":1e3,"messages":[{"role":"user","content":"héllo"}]}`,
	} {
		if status, _, resp := f.call(t, "/v1/chat/completions", body); status != 200 {
			t.Errorf("%s: status %d: %.300s", body, status, resp)
		}
	}
}
