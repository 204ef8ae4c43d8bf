package fakeprovider

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// OpenAI Responses API (POST /v1/responses).

type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

func newOutputText(text string) outputText {
	return outputText{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}
}

type outputMessage struct {
	Type    string       `json:"type"`
	ID      string       `json:"id"`
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

func newResponseUsage(input, output int) *responseUsage {
	return &responseUsage{InputTokens: input, OutputTokens: output, TotalTokens: input + output}
}

type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// responseObject is a Response as OpenAI answers it (the request's settings
// echoed with their defaults).
type responseObject struct {
	ID                 string          `json:"id"`
	Object             string          `json:"object"`
	CreatedAt          int64           `json:"created_at"`
	Status             string          `json:"status"`
	Background         bool            `json:"background"`
	Error              *responseError  `json:"error"`
	IncompleteDetails  any             `json:"incomplete_details"`
	Instructions       json.RawMessage `json:"instructions"`
	MaxOutputTokens    any             `json:"max_output_tokens"`
	Model              string          `json:"model"`
	Output             []outputMessage `json:"output"`
	ParallelToolCalls  bool            `json:"parallel_tool_calls"`
	PreviousResponseID any             `json:"previous_response_id"`
	Reasoning          map[string]any  `json:"reasoning"`
	ServiceTier        string          `json:"service_tier"`
	Store              bool            `json:"store"`
	Temperature        float64         `json:"temperature"`
	Text               map[string]any  `json:"text"`
	ToolChoice         string          `json:"tool_choice"`
	Tools              []any           `json:"tools"`
	TopP               float64         `json:"top_p"`
	Truncation         string          `json:"truncation"`
	Usage              *responseUsage  `json:"usage"`
	User               any             `json:"user"`
	Metadata           map[string]any  `json:"metadata"`
}

func (s *Server) newResponseObject(req *request, id, status string) responseObject {
	instructions := req.body.Instructions
	if len(instructions) == 0 {
		instructions = jsonNull
	}
	return responseObject{
		ID: id, Object: "response", CreatedAt: time.Now().Unix(), Status: status,
		Instructions: instructions, Model: req.call.Model, Output: []outputMessage{},
		ParallelToolCalls: true,
		Reasoning:         map[string]any{"effort": nil, "summary": nil},
		ServiceTier:       "default", Store: true, Temperature: 1,
		Text:       map[string]any{"format": map[string]string{"type": "text"}},
		ToolChoice: "auto", Tools: []any{}, TopP: 1, Truncation: "disabled",
		Metadata: map[string]any{},
	}
}

// responseInputTokens counts the words of "instructions" and "input" (a
// string, or items whose content is a string or parts with text).
func responseInputTokens(b reqBody) int {
	n := words(b.Instructions)
	var one string
	if json.Unmarshal(b.Input, &one) == nil {
		n += len(strings.Fields(one))
	} else {
		var items []struct {
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(b.Input, &items) == nil {
			for _, it := range items {
				n += words(it.Content)
			}
		}
	}
	return max(n, 1)
}

func (s *Server) serveResponse(w http.ResponseWriter, req *request, chunks int) {
	r := s.newResponseObject(req, s.newID("resp_"), "completed")
	r.Output = []outputMessage{{
		Type: "message", ID: s.newID("msg_"), Status: "completed", Role: "assistant",
		Content: []outputText{newOutputText(req.answerText(chunks))},
	}}
	r.Usage = newResponseUsage(responseInputTokens(req.body), 2*chunks)
	s.writeJSON(w, req, r)
}

// responseStream writes a Responses event stream: response.created,
// response.in_progress, response.output_item.added,
// response.content_part.added, one response.output_text.delta per chunk,
// response.output_text.done, response.content_part.done,
// response.output_item.done, response.completed. Each event is framed as
// "event: <type>" + "data: {...}" and carries its sequence_number.
type responseStream struct {
	s      *Server
	w      http.ResponseWriter
	req    *request
	sse    *sseWriter
	resp   responseObject
	itemID string
	seq    int
	text   strings.Builder
	nDelta int
}

func (s *Server) newResponseStream(w http.ResponseWriter, req *request) *responseStream {
	return &responseStream{
		s: s, w: w, req: req,
		resp:   s.newResponseObject(req, s.newID("resp_"), "in_progress"),
		itemID: s.newID("msg_"),
	}
}

// emit sends one event: fields plus "type" and the next sequence_number.
func (r *responseStream) emit(typ string, fields map[string]any) error {
	fields["type"] = typ
	fields["sequence_number"] = r.seq
	r.seq++
	return r.sse.json(typ, fields)
}

func (r *responseStream) item(status string, content []outputText) outputMessage {
	return outputMessage{Type: "message", ID: r.itemID, Status: status, Role: "assistant", Content: content}
}

func (r *responseStream) start() error {
	r.sse = r.s.startSSE(r.w, r.req)
	if err := r.emit("response.created", map[string]any{"response": r.resp}); err != nil {
		return err
	}
	if err := r.emit("response.in_progress", map[string]any{"response": r.resp}); err != nil {
		return err
	}
	err := r.emit("response.output_item.added", map[string]any{
		"output_index": 0, "item": r.item("in_progress", []outputText{}),
	})
	if err != nil {
		return err
	}
	return r.emit("response.content_part.added", map[string]any{
		"item_id": r.itemID, "output_index": 0, "content_index": 0, "part": newOutputText(""),
	})
}

func (r *responseStream) content(_ int, text string) error {
	r.nDelta++
	r.text.WriteString(text)
	return r.emit("response.output_text.delta", map[string]any{
		"item_id": r.itemID, "output_index": 0, "content_index": 0, "delta": text, "logprobs": []any{},
	})
}

// fail ends the stream with response.failed, the error's code and message
// in response.error, as OpenAI reports a failure after the stream began.
func (r *responseStream) fail(body []byte) error {
	var e struct {
		Error struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(streamBody(body), &e)
	code := ""
	if json.Unmarshal(e.Error.Code, &code) != nil || code == "" {
		code = e.Error.Type
	}
	if code == "" {
		code = "server_error"
	}
	failed := r.resp
	failed.Status = "failed"
	failed.Error = &responseError{Code: code, Message: e.Error.Message}
	failed.Output = []outputMessage{r.item("incomplete", []outputText{newOutputText(r.text.String())})}
	return r.emit("response.failed", map[string]any{"response": failed})
}

func (r *responseStream) finish() error {
	text := r.text.String()
	part := newOutputText(text)
	err := r.emit("response.output_text.done", map[string]any{
		"item_id": r.itemID, "output_index": 0, "content_index": 0, "text": text, "logprobs": []any{},
	})
	if err != nil {
		return err
	}
	err = r.emit("response.content_part.done", map[string]any{
		"item_id": r.itemID, "output_index": 0, "content_index": 0, "part": part,
	})
	if err != nil {
		return err
	}
	done := r.item("completed", []outputText{part})
	if err := r.emit("response.output_item.done", map[string]any{"output_index": 0, "item": done}); err != nil {
		return err
	}
	completed := r.resp
	completed.Status = "completed"
	completed.Output = []outputMessage{done}
	completed.Usage = newResponseUsage(responseInputTokens(r.req.body), 2*r.nDelta)
	return r.emit("response.completed", map[string]any{"response": completed})
}
