package fakeprovider

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// OpenAI legacy text completions (POST /v1/completions).

type completionChoice struct {
	Text         string          `json:"text"`
	Index        int             `json:"index"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

type textCompletion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint"`
	Choices           []completionChoice `json:"choices"`
	Usage             json.RawMessage    `json:"usage,omitempty"`
}

// completionPromptTokens counts the words of "prompt": a string or strings
// (token arrays count one per token).
func completionPromptTokens(raw json.RawMessage) int {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return max(len(strings.Fields(one)), 1)
	}
	var many []json.RawMessage
	if json.Unmarshal(raw, &many) != nil {
		return 1
	}
	n := 0
	for _, m := range many {
		if json.Unmarshal(m, &one) == nil {
			n += len(strings.Fields(one))
		} else {
			n++ // a token id
		}
	}
	return max(n, 1)
}

func (s *Server) serveCompletion(w http.ResponseWriter, req *request, chunks int) {
	stop := "stop"
	u, _ := json.Marshal(newChatUsage(completionPromptTokens(req.body.Prompt), 2*chunks))
	s.writeJSON(w, req, textCompletion{
		ID: s.newID("cmpl-"), Object: "text_completion", Created: time.Now().Unix(), Model: req.call.Model,
		SystemFingerprint: fingerprint,
		Choices:           []completionChoice{{Text: req.answerText(chunks), Logprobs: jsonNull, FinishReason: &stop}},
		Usage:             u,
	})
}

// completionStream writes a text_completion stream: one chunk per content
// chunk, a chunk with finish_reason "stop", a usage chunk (choices: []) when
// stream_options.include_usage is set, then [DONE].
type completionStream struct{ openAIStream }

func (s *Server) newCompletionStream(w http.ResponseWriter, req *request) *completionStream {
	return &completionStream{s.newOpenAIStream(w, req, "cmpl-")}
}

func (c *completionStream) chunk(text string, finish *string) textCompletion {
	ch := textCompletion{
		ID: c.id, Object: "text_completion", Created: c.created, Model: c.req.call.Model,
		SystemFingerprint: fingerprint,
		Choices:           []completionChoice{{Text: text, Logprobs: jsonNull, FinishReason: finish}},
	}
	if c.usage {
		ch.Usage = jsonNull
	}
	return ch
}

func (c *completionStream) content(_ int, text string) error {
	c.nContent++
	return c.sse.json("", c.chunk(text, nil))
}

func (c *completionStream) finish() error {
	stop := "stop"
	return c.end(c.chunk("", &stop), completionPromptTokens(c.req.body.Prompt), func(u json.RawMessage) any {
		last := c.chunk("", nil)
		last.Choices, last.Usage = []completionChoice{}, u
		return last
	})
}
