package fakeprovider

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Flavors: the wire format a call is answered in.
const (
	flavorOpenAI    = "openai"
	flavorAzure     = "azure"
	flavorAnthropic = "anthropic"
	flavorGemini    = "gemini"
)

type endpoint int

const (
	endpointUnknown endpoint = iota
	endpointChat
	endpointEmbeddings
	endpointModels
	endpointMessages
	endpointCompletions    // legacy text completions
	endpointModerations    // OpenAI moderations
	endpointImages         // OpenAI image generations
	endpointSpeech         // OpenAI text to speech: a chunked binary body
	endpointTranscriptions // OpenAI speech to text: a multipart/form-data body
	endpointResponses      // OpenAI Responses API
	endpointCountTokens    // Anthropic messages/count_tokens
)

// endpointRoutes are the endpoints by method and path suffix; the first
// that matches is the call's.
var endpointRoutes = []struct {
	method, suffix string
	endpoint       endpoint
}{
	{http.MethodPost, "/chat/completions", endpointChat},
	{http.MethodPost, "/completions", endpointCompletions},
	{http.MethodPost, "/embeddings", endpointEmbeddings},
	{http.MethodPost, "/messages", endpointMessages},
	{http.MethodPost, "/messages/count_tokens", endpointCountTokens},
	{http.MethodPost, "/moderations", endpointModerations},
	{http.MethodPost, "/images/generations", endpointImages},
	{http.MethodPost, "/audio/speech", endpointSpeech},
	{http.MethodPost, "/audio/transcriptions", endpointTranscriptions},
	{http.MethodPost, "/responses", endpointResponses},
	{http.MethodGet, "/models", endpointModels},
}

// textAnswer is how an endpoint that answers generated text is served:
// whole, or as an SSE stream when the body asks for one ("stream": true).
type textAnswer struct {
	serve  func(*Server, http.ResponseWriter, *request, int)
	stream func(*Server, http.ResponseWriter, *request) streamer
}

var textAnswers = map[endpoint]textAnswer{
	endpointChat: {(*Server).serveChat,
		func(s *Server, w http.ResponseWriter, r *request) streamer { return s.newChatStream(w, r) }},
	endpointMessages: {(*Server).serveMessage,
		func(s *Server, w http.ResponseWriter, r *request) streamer { return s.newMessageStream(w, r) }},
	endpointCompletions: {(*Server).serveCompletion,
		func(s *Server, w http.ResponseWriter, r *request) streamer { return s.newCompletionStream(w, r) }},
	endpointResponses: {(*Server).serveResponse,
		func(s *Server, w http.ResponseWriter, r *request) streamer { return s.newResponseStream(w, r) }},
	endpointTranscriptions: {(*Server).serveTranscription,
		func(s *Server, w http.ResponseWriter, r *request) streamer { return s.newTranscriptionStream(w, r) }},
}

// maxBody bounds what a call may send.
const maxBody = 32 << 20

// reqBody is what the fake reads from any request body.
type reqBody struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages []struct {
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	System         json.RawMessage `json:"system"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     int             `json:"dimensions"`
	Prompt         json.RawMessage `json:"prompt"`       // completions: a string or strings; images: a string
	Instructions   json.RawMessage `json:"instructions"` // responses
	N              int             `json:"n"`            // images
	// ResponseFormat is a string for images, speech and transcriptions and
	// an object for chat; read it with responseFormat.
	ResponseFormat json.RawMessage `json:"response_format"`
}

// responseFormat returns "response_format" when it is a string.
func (b reqBody) responseFormat() string {
	var f string
	if json.Unmarshal(b.ResponseFormat, &f) != nil {
		return ""
	}
	return f
}

// request is one provider call being served.
type request struct {
	r         *http.Request
	flavor    string
	endpoint  endpoint
	body      reqBody
	bodyErr   error
	call      Call
	requestID string
	form      map[string]string // the fields of a multipart/form-data body (transcriptions)
	limit     *limitVerdict     // the rate limiter's verdict; nil when it did not count the call
	text      []string          // the rule's content chunks (Rule.Text); nil: chunkText's
}

// chunk is the i-th content delta of the answer.
func (req *request) chunk(i int) string {
	if req.text != nil {
		return req.text[i]
	}
	return chunkText(i)
}

// answerText is the text of a whole answer of n chunks.
func (req *request) answerText(n int) string {
	if req.text != nil {
		return strings.Join(req.text, "")
	}
	return completionText(n)
}

func (s *Server) routes() http.Handler {
	control := s.controlRoutes()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/_fake/") {
			control.ServeHTTP(w, r)
			return
		}
		s.serveProvider(w, r)
	})
}

func (s *Server) serveProvider(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	defer func() {
		// A call cut short by Close must not look answered: drop the
		// connection instead of ending the response.
		select {
		case <-s.done:
			panic(http.ErrAbortHandler)
		default:
		}
	}()
	req := s.parse(r)
	authorized := len(s.opts.Keys) == 0 || slices.Contains(s.opts.Keys, req.call.Key)
	var rule *Rule
	if authorized {
		rule = s.admit(req)
		if rule != nil {
			req.call.Rule = rule.ID
		}
	}
	w = &statusWriter{ResponseWriter: w, s: s, call: s.record(req.call)}
	s.log.Debug("call", "method", r.Method, "path", r.URL.Path, "model", req.call.Model,
		"stream", req.call.Stream, "rule", req.call.Rule, "rate_limited", req.call.RateLimited)
	if req.call.RateLimited {
		// The limiter answers at once, before any rule or latency.
		s.writeError(w, req, limitError(req, req.limit), 0, limitWait(req, req.limit))
		return
	}

	var rl Rule
	if rule != nil {
		rl = *rule
	}
	latency := s.opts.Latency
	if rl.FirstByteLatency > 0 {
		latency = rl.FirstByteLatency
	}
	if !s.wait(ctx, latency) {
		return
	}
	// streaming: an SSE stream, which can carry an error event. chunked: a
	// body sent in chunks (SSE, or speech audio), which a rule can cut.
	text, isText := textAnswers[req.endpoint]
	streaming := req.call.Stream && isText
	chunked := streaming || req.endpoint == endpointSpeech
	switch {
	case rl.Hang:
		select {
		case <-ctx.Done():
		case <-s.done:
		}
		return
	case rl.Reset && !(chunked && (rl.CutAfter > 0 || rl.CutAtStart)):
		resetConn(w)
		return
	case !authorized:
		s.writeError(w, req, invalidKeyError(req), 0, 0)
		return
	case rl.Error != "" && !(rl.ErrorInStream && streaming):
		s.writeError(w, req, rl.Error, rl.Status, rl.RetryAfter)
		return
	case rl.Status != 0 && rl.Error == "" && !rl.ErrorInStream:
		s.writeError(w, req, defaultError(req.flavor), rl.Status, rl.RetryAfter)
		return
	case req.endpoint == endpointUnknown:
		s.writeError(w, req, "openai.invalid_url", 0, 0)
		return
	case req.bodyErr != nil && req.endpoint == endpointTranscriptions:
		s.writeError(w, req, "openai.invalid_file", 0, 0)
		return
	case req.bodyErr != nil:
		s.writeError(w, req, badRequestError(req.flavor), 0, 0)
		return
	case s.opts.StrictModels && req.endpoint != endpointModels && !s.models[req.call.Model]:
		s.writeError(w, req, modelNotFoundError(req.flavor), 0, 0)
		return
	}

	chunks := s.opts.Chunks
	if rl.Chunks > 0 {
		chunks = rl.Chunks
	}
	if len(rl.Text) > 0 {
		chunks, req.text = len(rl.Text), rl.Text
	}
	delay := s.opts.ChunkDelay
	if rl.ChunkDelay > 0 {
		delay = rl.ChunkDelay
	}
	switch req.endpoint {
	case endpointModels:
		s.serveModels(w, req)
	case endpointEmbeddings:
		s.serveEmbeddings(w, req)
	case endpointModerations:
		s.serveModerations(w, req)
	case endpointImages:
		s.serveImages(w, req)
	case endpointCountTokens:
		s.serveCountTokens(w, req)
	case endpointSpeech:
		// Audio is a binary body: no error event can follow its first
		// bytes, so ErrorInStream does not apply (the rule's Error, if any,
		// was answered above).
		rl.ErrorInStream = false
		s.runStream(ctx, w, req, rl, s.newSpeechStream(w, req, chunks), chunks, delay)
	default: // textAnswers
		if !streaming {
			// A non-streamed answer takes as long as the stream would.
			if !s.wait(ctx, time.Duration(max(chunks-1, 0))*delay) {
				return
			}
			text.serve(s, w, req, chunks)
			return
		}
		s.runStream(ctx, w, req, rl, text.stream(s, w, req), chunks, delay)
	}
}

// parse reads the call: flavor, endpoint, key, model and body.
func (s *Server) parse(r *http.Request) *request {
	req := &request{r: r, requestID: s.newID("req_")}
	p := r.URL.Path
	var deployment string
	switch {
	case strings.Contains(p, "/openai/deployments/"):
		req.flavor = flavorAzure
		rest := p[strings.Index(p, "/openai/deployments/")+len("/openai/deployments/"):]
		deployment, _, _ = strings.Cut(rest, "/")
	case strings.Contains(p, "/v1beta/openai/"):
		req.flavor = flavorGemini
	case strings.HasSuffix(p, "/messages"), strings.HasSuffix(p, "/messages/count_tokens"):
		req.flavor = flavorAnthropic
	default:
		req.flavor = flavorOpenAI
	}
	for _, rt := range endpointRoutes {
		if r.Method == rt.method && strings.HasSuffix(p, rt.suffix) {
			req.endpoint = rt.endpoint
			break
		}
	}
	if req.endpoint == endpointModels && req.flavor == flavorOpenAI &&
		(r.Header.Get("anthropic-version") != "" || r.Header.Get("x-api-key") != "") {
		req.flavor = flavorAnthropic
	}

	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	var fileSize int64
	switch {
	case err != nil:
		req.bodyErr = err
	case req.endpoint == endpointTranscriptions:
		req.form, fileSize, req.bodyErr = parseMultipart(r.Header.Get("Content-Type"), body)
		req.body.Model = req.form["model"]
		req.body.Stream = req.form["stream"] == "true"
	case req.endpoint != endpointModels && req.endpoint != endpointUnknown:
		req.bodyErr = json.Unmarshal(body, &req.body)
	}
	model := req.body.Model
	if deployment != "" {
		model = deployment
	}
	req.call = Call{
		At:             time.Now(),
		Method:         r.Method,
		Path:           p,
		Query:          r.URL.RawQuery,
		Header:         r.Header.Clone(),
		Key:            presentedKey(r, req.flavor),
		Model:          model,
		Stream:         req.body.Stream,
		Body:           body,
		FileSize:       fileSize,
		IdempotencyKey: r.Header.Get("Idempotency-Key"),
	}
	return req
}

// presentedKey returns the credential of the call, looking first where the
// flavor carries it.
func presentedKey(r *http.Request, flavor string) string {
	bearer := func() string {
		a := r.Header.Get("Authorization")
		if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
			return strings.TrimSpace(a[7:])
		}
		return ""
	}
	header := func(name string) func() string { return func() string { return r.Header.Get(name) } }
	query := func() string { return r.URL.Query().Get("key") }
	var order []func() string
	switch flavor {
	case flavorAnthropic:
		order = []func() string{header("x-api-key"), bearer}
	case flavorAzure:
		order = []func() string{header("api-key"), bearer}
	case flavorGemini:
		order = []func() string{header("x-goog-api-key"), query, bearer}
	default:
		order = []func() string{bearer}
	}
	order = append(order, bearer, header("x-api-key"), header("api-key"), header("x-goog-api-key"), query)
	for _, f := range order {
		if k := f(); k != "" {
			return k
		}
	}
	return ""
}

func invalidKeyError(req *request) string {
	switch req.flavor {
	case flavorAnthropic:
		return "anthropic.invalid_api_key"
	case flavorAzure:
		return "azure.invalid_api_key"
	case flavorGemini:
		return "gemini.api_key_invalid"
	}
	if req.call.Key == "" {
		return "openai.missing_api_key"
	}
	return "openai.invalid_api_key"
}

func modelNotFoundError(flavor string) string {
	switch flavor {
	case flavorAnthropic:
		return "anthropic.not_found"
	case flavorAzure:
		return "azure.deployment_not_found"
	case flavorGemini:
		return "gemini.model_not_found"
	}
	return "openai.model_not_found"
}

func badRequestError(flavor string) string {
	if flavor == flavorAnthropic {
		return "anthropic.invalid_request"
	}
	return "openai.invalid_json"
}

// defaultError is the flavor's generic server error, used for a rule that
// sets only a Status and for ErrorInStream without Error.
func defaultError(flavor string) string {
	switch flavor {
	case flavorAnthropic:
		return "anthropic.overloaded"
	case flavorGemini:
		return "gemini.internal"
	}
	return "openai.server_error"
}

func (s *Server) renderError(req *request, name string, retryAfter time.Duration) (ErrorSpec, http.Header, []byte) {
	spec, ok := LookupError(name)
	if !ok {
		spec = ErrorSpec{
			Name: name, Flavor: req.flavor, Status: http.StatusInternalServerError,
			Body: `{"error":{"message":"fakeprovider: unknown error name {{name}}","type":"fakeprovider_error","param":null,"code":null}}`,
		}
		spec.Body = strings.ReplaceAll(spec.Body, "{{name}}", jsonEscape(name))
	}
	p := errorParams{
		Model: req.call.Model, Key: req.call.Key, Method: req.r.Method, Path: req.r.URL.Path,
		RequestID: req.requestID, RetryAfter: retryAfter,
	}
	limitParams(&p, req.limit)
	h, body := spec.render(p)
	return spec, h, body
}

// writeError answers with the named error; status 0 keeps the error's own.
func (s *Server) writeError(w http.ResponseWriter, req *request, name string, status int, retryAfter time.Duration) {
	spec, h, body := s.renderError(req, name, retryAfter)
	for k, v := range h {
		w.Header()[k] = v
	}
	if status == 0 {
		status = spec.Status
	}
	ct := "application/json"
	if spec.Flavor == flavorGemini {
		ct = "application/json; charset=UTF-8"
	}
	s.writeBody(w, req, status, ct, body)
}

func (s *Server) writeJSON(w http.ResponseWriter, req *request, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		s.log.Error("marshal response", "err", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	s.writeBody(w, req, http.StatusOK, "application/json", body)
}

func (s *Server) writeBody(w http.ResponseWriter, req *request, status int, contentType string, body []byte) {
	s.setHeaders(w.Header(), req)
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	if _, err := w.Write(body); err != nil {
		s.log.Debug("write response", "err", err)
	}
}

// setHeaders sets the headers every answer of a call carries: the
// request ids and, when the rate limiter counted the call, its limits.
func (s *Server) setHeaders(h http.Header, req *request) {
	setIDHeaders(h, req)
	s.setLimitHeaders(h, req)
}

// setIDHeaders sets the request id headers the flavor's API sends.
func setIDHeaders(h http.Header, req *request) {
	h.Set("x-request-id", req.requestID)
	switch req.flavor {
	case flavorAnthropic:
		h.Set("request-id", req.requestID)
	case flavorAzure:
		h.Set("apim-request-id", req.requestID)
	case flavorOpenAI:
		h.Set("openai-version", "2020-10-01")
		h.Set("openai-processing-ms", "1")
	}
}

// resetConn resets the call's TCP connection: SO_LINGER 0, then close, so the
// client sees ECONNRESET.
func resetConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2, a recorder): abort the handler instead.
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
