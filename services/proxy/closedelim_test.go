package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/config"
)

// closeDelimitedUpstream answers every request with an event stream that
// has neither Content-Length nor chunked encoding (its end is the end of
// the connection), and waits for release before sending the rest: the
// first events must reach the caller while the stream is still open.
func closeDelimitedUpstream(t *testing.T, release <-chan struct{}) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				chunk := func(s string) string {
					return `data: {"id":"c1","object":"chat.completion.chunk","model":"demo-model","choices":[{"index":0,"delta":` + s + `}]}` + "\n\n"
				}
				_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"+
					chunk(`{"role":"assistant","content":""},"finish_reason":null`)+chunk(`{"content":"first"},"finish_reason":null`))
				select {
				case <-release:
				case <-time.After(10 * time.Second):
				}
				_, _ = io.WriteString(conn, chunk(`{},"finish_reason":"stop"`)+"data: [DONE]\n\n")
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestCloseDelimitedStreamIsRelayedAsItArrives: a stream delimited by the
// connection's close is relayed event by event, like a chunked one, not
// buffered until the upstream closes.
func TestCloseDelimitedStreamIsRelayedAsItArrives(t *testing.T) {
	release := make(chan struct{})
	up := closeDelimitedUpstream(t, release)
	f := newFixture(t, func(c *config.Config) { c.Providers[0].BaseURL = up + "/v1" })

	req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"demo-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	got := make(chan string, 1)
	rest := make(chan string, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				got <- "error: " + err.Error()
				return
			}
			if strings.Contains(line, `"first"`) {
				got <- "first"
				break
			}
		}
		b, _ := io.ReadAll(br)
		rest <- string(b)
	}()
	select {
	case g := <-got:
		if g != "first" {
			t.Fatalf("before the first content: %s", g)
		}
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("the first content event did not reach the caller while the upstream stream was open")
	}
	close(release)
	if r := <-rest; !strings.Contains(r, "[DONE]") {
		t.Fatalf("the stream did not end with [DONE]: %s", r)
	}
}
