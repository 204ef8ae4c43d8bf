package fakeprovider

import (
	"net/http"
	"time"
)

type anthropicUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type anthropicMessage struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []textBlock    `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        anthropicUsage `json:"usage"`
}

func (s *Server) serveMessage(w http.ResponseWriter, req *request, chunks int) {
	stop := "end_turn"
	s.writeJSON(w, req, anthropicMessage{
		ID: s.newID("msg_"), Type: "message", Role: "assistant", Model: req.call.Model,
		Content:    []textBlock{{Type: "text", Text: req.answerText(chunks)}},
		StopReason: &stop,
		Usage:      anthropicUsage{InputTokens: promptTokens(req.body), OutputTokens: 2 * chunks},
	})
}

// messageStream writes an Anthropic Messages event stream.
type messageStream struct {
	s        *Server
	w        http.ResponseWriter
	req      *request
	sse      *sseWriter
	nContent int
}

func (s *Server) newMessageStream(w http.ResponseWriter, req *request) *messageStream {
	return &messageStream{s: s, w: w, req: req}
}

func (m *messageStream) start() error {
	m.sse = m.s.startSSE(m.w, m.req)
	msg := anthropicMessage{
		ID: m.s.newID("msg_"), Type: "message", Role: "assistant", Model: m.req.call.Model,
		Content: []textBlock{},
		Usage:   anthropicUsage{InputTokens: promptTokens(m.req.body), OutputTokens: 1},
	}
	if err := m.sse.json("message_start", map[string]any{"type": "message_start", "message": msg}); err != nil {
		return err
	}
	err := m.sse.json("content_block_start", map[string]any{
		"type": "content_block_start", "index": 0, "content_block": textBlock{Type: "text"},
	})
	if err != nil {
		return err
	}
	return m.sse.event("ping", []byte(`{"type": "ping"}`))
}

func (m *messageStream) content(_ int, text string) error {
	m.nContent++
	return m.sse.json("content_block_delta", map[string]any{
		"type": "content_block_delta", "index": 0,
		"delta": map[string]string{"type": "text_delta", "text": text},
	})
}

func (m *messageStream) fail(body []byte) error {
	return m.sse.event("error", streamBody(body))
}

func (m *messageStream) finish() error {
	if err := m.sse.event("content_block_stop", []byte(`{"type":"content_block_stop","index":0}`)); err != nil {
		return err
	}
	err := m.sse.json("message_delta", map[string]any{
		"type":  "message_delta",
		"delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
		"usage": map[string]int{"output_tokens": 2 * m.nContent},
	})
	if err != nil {
		return err
	}
	return m.sse.event("message_stop", []byte(`{"type":"message_stop"}`))
}

type anthropicModel struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
}

func (s *Server) serveAnthropicModels(w http.ResponseWriter, req *request) {
	data := make([]anthropicModel, len(s.opts.Models))
	for i, m := range s.opts.Models {
		data[i] = anthropicModel{Type: "model", ID: m, DisplayName: m, CreatedAt: modelsCreated.Format(time.RFC3339)}
	}
	var first, last *string
	if len(data) > 0 {
		first, last = &data[0].ID, &data[len(data)-1].ID
	}
	s.writeJSON(w, req, struct {
		Data    []anthropicModel `json:"data"`
		HasMore bool             `json:"has_more"`
		FirstID *string          `json:"first_id"`
		LastID  *string          `json:"last_id"`
	}{data, false, first, last})
}

// countTokens is the fake's token count of a count_tokens body: a quarter of
// its bytes, at least 1. Deterministic, not a real tokenizer.
func countTokens(body []byte) int {
	return max(1, (len(body)+3)/4)
}

func (s *Server) serveCountTokens(w http.ResponseWriter, req *request) {
	s.writeJSON(w, req, struct {
		InputTokens int `json:"input_tokens"`
	}{countTokens(req.call.Body)})
}
