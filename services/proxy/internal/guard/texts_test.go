package guard

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

func texts(body string, f Format) []string {
	var t Texts
	t.Reset([]byte(body), f)
	out := []string{}
	for i := range t.Len() {
		out = append(out, string(t.Text(i)))
	}
	return out
}

func TestTexts(t *testing.T) {
	cases := []struct {
		name string
		f    Format
		body string
		want []string
	}{
		{"chat", Chat, `{"model":"m","user":"u-1","messages":[{"role":"system","content":"be brief"},
			{"role":"user","content":[{"type":"text","text":"line\none"},{"type":"image_url","image_url":{"url":"data:x"}}]},
			{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"card\":\"4111\"}"}}]},
			{"role":"tool","tool_call_id":"c1","content":"result \u00e9"}]}`,
			[]string{"be brief", "line\none", `{"card":"4111"}`, "result é"}},
		{"messages", Messages, `{"model":"m","max_tokens":5,"system":[{"type":"text","text":"sys"}],"messages":[
			{"role":"user","content":"hi"},
			{"role":"user","content":[{"type":"text","text":"a"},{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"out"}]},{"type":"tool_result","content":"plain"}]}]}`,
			[]string{"sys", "hi", "a", "out", "plain"}},
		{"messages, system string", Messages, `{"system":"s","messages":[]}`, []string{"s"}},
		{"responses", Responses, `{"model":"m","instructions":"ins","input":[{"role":"user","content":[{"type":"input_text","text":"q"}]},
			{"type":"function_call_output","call_id":"c","output":"o"},{"role":"user","content":"str"}]}`,
			[]string{"ins", "q", "o", "str"}},
		{"responses, input string", Responses, `{"input":"just this"}`, []string{"just this"}},
		{"completions", Completions, `{"prompt":["a","b"],"model":"m"}`, []string{"a", "b"}},
		{"embeddings", Embeddings, `{"input":"e"}`, []string{"e"}},
		{"embeddings, token ids", Embeddings, `{"input":[1,2,3]}`, []string{}},
		{"no text", Chat, `{"model":"m"}`, []string{}},
	}
	for _, c := range cases {
		if got := texts(c.body, c.f); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestRewriteChangesOnlyTheText(t *testing.T) {
	body := []byte(`{"model":"card-model","messages":[{"role":"user","content":"my card 4111 and \"quotes\""},{"role":"user","content":"keep"}],"temperature":0.5}`)
	var tx Texts
	tx.Reset(body, Chat)
	out := tx.Rewrite(nil, func(i int, text []byte) ([]byte, bool) {
		if !bytes.Contains(text, []byte("4111")) {
			return nil, false
		}
		return bytes.ReplaceAll(text, []byte("4111"), []byte("[REDACTED]\n")), true
	})
	var got struct {
		Model       string
		Messages    []struct{ Content string }
		Temperature float64
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	if got.Model != "card-model" || got.Temperature != 0.5 || got.Messages[0].Content != "my card [REDACTED]\n and \"quotes\"" || got.Messages[1].Content != "keep" {
		t.Errorf("rewritten %s", out)
	}
	same := tx.Rewrite(nil, func(int, []byte) ([]byte, bool) { return nil, false })
	if !bytes.Equal(same, body) {
		t.Errorf("nothing replaced, but the body changed: %s", same)
	}
}

func TestTextsAllocatesNothingOnceWarm(t *testing.T) {
	body := []byte(`{"messages":[{"role":"user","content":"a\nb"},{"role":"user","content":[{"type":"text","text":"c"}]}]}`)
	var tx Texts
	tx.Reset(body, Chat)
	_ = tx.Text(0)
	n := testing.AllocsPerRun(100, func() {
		tx.Reset(body, Chat)
		for i := range tx.Len() {
			_ = tx.Text(i)
		}
	})
	if n != 0 {
		t.Errorf("%v allocations per request", n)
	}
}

func TestTextsCut(t *testing.T) {
	var b bytes.Buffer
	b.WriteString(`{"input":[`)
	for i := range maxSpans + 1 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"x"`)
	}
	b.WriteString(`]}`)
	var tx Texts
	tx.Reset(b.Bytes(), Embeddings)
	if !tx.Cut() || tx.Len() != maxSpans {
		t.Errorf("cut %v, %d values", tx.Cut(), tx.Len())
	}
}
