package fakeprovider

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Streams: the loop that drives a flavor's events, the SSE writer, and the
// deterministic text and token counts every answer shares.

// streamer writes one flavor's stream events.
type streamer interface {
	start() error
	content(i int, text string) error
	fail(body []byte) error
	finish() error
}

// runStream drives a stream: the flavor's preamble, chunks content chunks
// with delay between them, then the terminal events, unless the rule cuts,
// resets or fails the stream first.
func (s *Server) runStream(ctx context.Context, w http.ResponseWriter, req *request, rl Rule, st streamer, chunks int, delay time.Duration) {
	if st.start() != nil {
		return
	}
	cutAt, failAt := -1, -1
	switch {
	case rl.CutAtStart:
		cutAt = 0
	case rl.CutAfter > 0:
		cutAt = min(rl.CutAfter, chunks)
	}
	if rl.ErrorInStream {
		failAt = min(rl.ErrorAfterChunks, chunks)
	}
	for i := 0; ; i++ {
		if i == failAt {
			name := rl.Error
			if name == "" {
				name = defaultError(req.flavor)
			}
			_, _, body := s.renderError(req, name, rl.RetryAfter)
			_ = st.fail(body)
			return
		}
		if i == cutAt {
			if rl.Reset {
				resetConn(w)
			}
			return
		}
		if i == chunks {
			break
		}
		if i > 0 && !s.wait(ctx, delay) {
			return
		}
		if st.content(i, req.chunk(i)) != nil {
			return
		}
	}
	_ = st.finish()
}

// chunkText is the i-th content delta; the full text is their concatenation:
// "chunk 0 chunk 1 chunk 2 ...".
func chunkText(i int) string {
	if i == 0 {
		return "chunk 0"
	}
	return " chunk " + strconv.Itoa(i)
}

// completionText is the text of a non-streamed answer with n chunks.
func completionText(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(chunkText(i))
	}
	return b.String()
}

// sseWriter writes server-sent events and flushes each.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (s *Server) startSSE(w http.ResponseWriter, req *request) *sseWriter {
	s.setHeaders(w.Header(), req)
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{w: w, rc: http.NewResponseController(w)}
	_ = sw.rc.Flush()
	return sw
}

// event writes "event: name" (when name is set) and "data: data".
func (sw *sseWriter) event(name string, data []byte) error {
	buf := make([]byte, 0, len(name)+len(data)+16)
	if name != "" {
		buf = append(buf, "event: "...)
		buf = append(buf, name...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	if _, err := sw.w.Write(buf); err != nil {
		return err
	}
	return sw.rc.Flush()
}

func (sw *sseWriter) json(name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return sw.event(name, data)
}

// promptTokens estimates the prompt size: the words of every message and the
// system prompt. Deterministic, not a real tokenizer.
func promptTokens(b reqBody) int {
	n := words(b.System)
	for _, m := range b.Messages {
		n += words(m.Content)
	}
	return max(n, 1)
}

func words(raw json.RawMessage) int {
	if len(raw) == 0 {
		return 0
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return len(strings.Fields(s))
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		n := 0
		for _, p := range parts {
			n += len(strings.Fields(p.Text))
		}
		return n
	}
	return 0
}
