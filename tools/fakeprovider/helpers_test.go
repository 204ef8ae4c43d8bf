package fakeprovider

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// start runs a fake provider on a random port for the test.
func start(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := Start(opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// client returns an HTTP client whose idle connections are closed at the
// end of the test.
func client(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// call sends method path with a JSON body and headers.
func call(t *testing.T, c *http.Client, method, url, body string, hdr map[string]string) *http.Response {
	t.Helper()
	resp, err := send(context.Background(), c, method, url, body, hdr)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp
}

func send(ctx context.Context, c *http.Client, method, url, body string, hdr map[string]string) (*http.Response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return c.Do(req)
}

func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return b
}

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

// sseEvent is one parsed server-sent event and when it arrived.
type sseEvent struct {
	Name string
	Data string
	At   time.Time
}

// readSSE parses a whole event stream. It returns the events read and the
// read error, if any (nil at a clean end).
func readSSE(body io.Reader) ([]sseEvent, error) {
	var (
		events []sseEvent
		cur    sseEvent
		data   []string
	)
	br := bufio.NewReader(body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return events, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if len(data) > 0 || cur.Name != "" {
				cur.Data = strings.Join(data, "\n")
				cur.At = time.Now()
				events = append(events, cur)
			}
			cur, data = sseEvent{}, nil
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "event":
			cur.Name = value
		case "data":
			data = append(data, value)
		}
	}
}

// chatBody is an OpenAI chat request.
func chatBody(model string, stream, usage bool) string {
	b := map[string]any{
		"model":    model,
		"messages": []map[string]string{{"role": "user", "content": "say hello to the fake"}},
	}
	if stream {
		b["stream"] = true
	}
	if usage {
		b["stream_options"] = map[string]bool{"include_usage": true}
	}
	out, _ := json.Marshal(b)
	return string(out)
}

// messagesBody is an Anthropic Messages request.
func messagesBody(model string, stream bool) string {
	out, _ := json.Marshal(map[string]any{
		"model": model, "max_tokens": 100, "stream": stream,
		"system":   "be brief",
		"messages": []map[string]any{{"role": "user", "content": []map[string]string{{"type": "text", "text": "hi there"}}}},
	})
	return string(out)
}

// chatText concatenates the content deltas of an OpenAI stream.
func chatText(t *testing.T, events []sseEvent) string {
	t.Helper()
	var b bytes.Buffer
	for _, e := range events {
		if e.Data == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		decode(t, []byte(e.Data), &ch)
		for _, c := range ch.Choices {
			b.WriteString(c.Delta.Content)
		}
	}
	return b.String()
}

// messageText concatenates the text deltas of an Anthropic stream.
func messageText(t *testing.T, events []sseEvent) string {
	t.Helper()
	var b bytes.Buffer
	for _, e := range events {
		if e.Name != "content_block_delta" {
			continue
		}
		var d struct {
			Delta struct {
				Text string `json:"text"`
			} `json:"delta"`
		}
		decode(t, []byte(e.Data), &d)
		b.WriteString(d.Delta.Text)
	}
	return b.String()
}
