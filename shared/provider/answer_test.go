package provider

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"switchyard.dev/shared/jsonfield"
	"switchyard.dev/shared/usage"
)

// checkAnswerOld is the answer check as the proxy made it before
// CheckAnswer, one function (and one walk or more) per question: the
// oracle CheckAnswer must agree with.
func checkAnswerOld(f Format, op Op, usageFormat Format, body []byte) Answer {
	if status, isErr := ErrorIn200(body); isErr {
		return Answer{ErrorStatus: status}
	}
	if op == OpTranscriptions {
		return Answer{}
	}
	if err := validResponse(f, op, body); err != nil {
		return Answer{Invalid: err}
	}
	if op == OpChat && f == FormatOpenAI && emptyChoices(body) {
		return Answer{NoChoices: true}
	}
	t, ok := responseUsage(usageFormat, body)
	return Answer{Tokens: t, TokensOK: ok}
}

func sameAnswer(a, b Answer) bool {
	if (a.Invalid == nil) != (b.Invalid == nil) || a.Invalid != nil && a.Invalid.Error() != b.Invalid.Error() {
		return false
	}
	a.Invalid, b.Invalid = nil, nil
	return a == b
}

// chatAnswer is a typical chat completion (services/proxy benchCompletion).
const chatAnswer = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`

func TestCheckAnswer(t *testing.T) {
	tests := []struct {
		name        string
		f           Format
		op          Op
		usageFormat Format
		body        string
		want        Answer
		invalid     string
	}{
		{"chat", FormatOpenAI, OpChat, FormatOpenAI, chatAnswer,
			Answer{Tokens: usage.Tokens{Input: 3, Output: 2}, TokensOK: true}, ""},
		{"no usage", FormatOpenAI, OpChat, FormatOpenAI, `{"id":"x","choices":[{"index":0}]}`, Answer{}, ""},
		{"usage not an object", FormatOpenAI, OpChat, FormatOpenAI, `{"id":"x","choices":[{}],"usage":null}`, Answer{}, ""},
		{"escaped keys", FormatOpenAI, OpChat, FormatOpenAI, `{"\u0063hoices":[{}],"usag\u0065":{"prompt_tokens":7}}`,
			Answer{Tokens: usage.Tokens{Input: 7}, TokensOK: true}, ""},
		{"error in 200", FormatOpenAI, OpChat, FormatOpenAI, ` {"error":{"code":429,"message":"slow down"}}`, Answer{ErrorStatus: 429}, ""},
		{"error string", FormatOpenAI, OpChat, FormatOpenAI, `{"error":"bad"}`, Answer{ErrorStatus: 502}, ""},
		{"error in cut JSON", FormatOpenAI, OpChat, FormatOpenAI, `{"error":{"code":503},"choices":[`, Answer{ErrorStatus: 503}, ""},
		{"completion with an error field", FormatOpenAI, OpChat, FormatOpenAI, `{"id":"x","error":{"code":500},"choices":[{}]}`, Answer{}, ""},
		{"null error", FormatOpenAI, OpChat, FormatOpenAI, `{"error":null,"choices":[{}]}`, Answer{}, ""},
		{"empty choices", FormatOpenAI, OpChat, FormatOpenAI, `{"id":"x","choices":[ ],"usage":{"prompt_tokens":1}}`, Answer{NoChoices: true}, ""},
		{"empty choices of completions", FormatOpenAI, OpCompletions, FormatOpenAI, `{"id":"x","choices":[]}`, Answer{}, ""},
		{"empty", FormatOpenAI, OpChat, FormatOpenAI, ` `, Answer{}, "not a valid response: empty body"},
		{"html", FormatOpenAI, OpChat, FormatOpenAI, `<html><body>Bad gateway</body></html>`, Answer{}, `not a valid response: not a JSON object ("<html><body>Bad gateway</body></"...)`},
		{"cut", FormatOpenAI, OpChat, FormatOpenAI, `{"id":"x","choices":[{}]`, Answer{}, `not a valid response: not a JSON object ("{\"id\":\"x\",\"choices\":[{}]"...)`},
		{"no field", FormatAnthropic, OpChat, FormatAnthropic, `{"id":"x","choices":[{}]}`, Answer{}, `not a valid response: no "content" field`},
		{"anthropic", FormatAnthropic, OpChat, FormatAnthropic, `{"id":"m","content":[],"usage":{"input_tokens":4,"output_tokens":6}}`,
			Answer{Tokens: usage.Tokens{Input: 4, Output: 6}, TokensOK: true}, ""},
		{"responses", FormatOpenAI, OpResponses, FormatResponses, `{"output":[],"usage":{"input_tokens":4,"output_tokens":6}}`,
			Answer{Tokens: usage.Tokens{Input: 4, Output: 6}, TokensOK: true}, ""},
		{"embeddings", FormatOpenAI, OpEmbeddings, FormatOpenAI, `{"data":[],"usage":{"prompt_tokens":2,"total_tokens":2}}`,
			Answer{Tokens: usage.Tokens{Input: 2}, TokensOK: true}, ""},
		{"transcript", FormatOpenAI, OpTranscriptions, FormatOpenAI, `hello world`, Answer{}, ""},
		{"transcript error", FormatOpenAI, OpTranscriptions, FormatOpenAI, `{"error":{"code":"500"}}`, Answer{ErrorStatus: 500}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CheckAnswer(tt.f, tt.op, tt.usageFormat, []byte(tt.body))
			old := checkAnswerOld(tt.f, tt.op, tt.usageFormat, []byte(tt.body))
			if !sameAnswer(got, old) {
				t.Errorf("CheckAnswer = %+v, the old checks %+v", got, old)
			}
			if tt.invalid != "" {
				if got.Invalid == nil || got.Invalid.Error() != tt.invalid || !errors.Is(got.Invalid, ErrInvalidResponse) {
					t.Errorf("Invalid = %v, want %s", got.Invalid, tt.invalid)
				}
				got.Invalid = nil
			}
			if !sameAnswer(got, tt.want) {
				t.Errorf("CheckAnswer = %+v, want %+v", got, tt.want)
			}
		})
	}
	body := []byte(chatAnswer)
	if n := testing.AllocsPerRun(100, func() { CheckAnswer(FormatOpenAI, OpChat, FormatOpenAI, body) }); n != 0 {
		t.Errorf("CheckAnswer allocates %v times", n)
	}
}

// FuzzCheckAnswer: CheckAnswer's one walk gives the verdicts of ErrorIn200,
// ValidResponse, EmptyChoices and ResponseUsage, for every format and op.
func FuzzCheckAnswer(f *testing.F) {
	for _, s := range []string{
		chatAnswer,
		`{"id":"x","choices":[ ],"usage":{"prompt_tokens":1}}`,
		` {"error":{"code":429,"message":"slow down"}}`,
		`{"id":"x","error":{"code":500},"choices":[{}]}`,
		`{"error":{"code":503},"choices":[`,
		`{"id":"m","content":[],"usage":{"input_tokens":4,"output_tokens":6,"cache_read_input_tokens":2}}`,
		`{"output":[],"usage":{"input_tokens":4,"input_tokens_details":{"cached_tokens":1},"output_tokens":6}}`,
		`{"\u0063hoices":[{}],"usag\u0065":{"prompt_tokens":7},"usage":{"prompt_tokens":8}}`,
		`{"data":[],"results":[],"input_tokens":3,"usage":null}`,
		`<html></html>`,
		``,
	} {
		for op := range 10 {
			f.Add([]byte(s), uint8(op), uint8(op%2), uint8(op%3))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, op, format, usageFormat uint8) {
		o, fm, uf := Op(op%(uint8(OpTranscriptions)+1)), Format(format%3), Format(usageFormat%3)
		got, old := CheckAnswer(fm, o, uf, body), checkAnswerOld(fm, o, uf, body)
		if !sameAnswer(got, old) {
			t.Fatalf("CheckAnswer(%v, %v, %v) = %+v, the old checks %+v", fm, o, uf, got, old)
		}
	})
}

// BenchmarkCheckAnswer: the checks of a typical chat completion, the old
// way (four functions, four walks and a validation) and with CheckAnswer.
func BenchmarkCheckAnswer(b *testing.B) {
	body := []byte(chatAnswer)
	b.Run("old", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			checkAnswerOld(FormatOpenAI, OpChat, FormatOpenAI, body)
		}
	})
	b.Run("new", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			CheckAnswer(FormatOpenAI, OpChat, FormatOpenAI, body)
		}
	})
}

// The old functions, one walk each, kept as the oracle.

// ValidResponse checks that a 200 body is the response the operation asks
// for: a JSON object carrying the field every such response has (OpenAI
// chat "choices", Anthropic messages "content", embeddings "data", a model
// list "data"). An upstream that answers 200 with an HTML page, plain text
// or truncated JSON has failed, whatever its status says.
func validResponse(f Format, op Op, body []byte) error {
	b := bytes.TrimLeft(body, " \t\r\n")
	if len(b) == 0 {
		return fmt.Errorf("%w: empty body", ErrInvalidResponse)
	}
	if b[0] != '{' || !jsonfield.Valid(b) {
		return fmt.Errorf("%w: not a JSON object (%q...)", ErrInvalidResponse, clipBytes(b, 32))
	}
	field := responseField(f, op)
	if _, _, _, ok := jsonfield.Find(b, field); !ok {
		return fmt.Errorf("%w: no %q field", ErrInvalidResponse, field)
	}
	return nil
}

// EmptyChoices reports whether an OpenAI-format chat completion came back
// with no choices at all (an error in disguise).
func emptyChoices(body []byte) bool {
	v, _, _, ok := jsonfield.Find(body, "choices")
	if !ok {
		return false
	}
	return len(bytes.TrimSpace(bytes.Trim(bytes.TrimSpace(v), "[]"))) == 0
}

// ResponseUsage reads the token usage a provider reports in a response body
// in format f (chat completions and embeddings in OpenAI's format, messages
// in Anthropic's). ok is false when the body reports none.
func responseUsage(f Format, body []byte) (t usage.Tokens, ok bool) {
	u, found := object(body, "usage")
	if !found {
		return usage.Tokens{}, false
	}
	return usageObject(f, u, usage.Tokens{})
}
