package servicetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/testkit"
)

// ListenerLimits are the limits ListenerLimits configures: reads cut
// after half a second, three connections at most.
var listenerLimits = config.Limits{ReadTimeout: 500 * time.Millisecond, IdleTimeout: time.Minute, MaxConnections: 3}

// ListenerLimits checks that a service's listener cuts slow senders and
// refuses connections over its cap, while others are served. build gets
// the limits to put in the service's configuration (limits.read_timeout
// 500ms, limits.max_connections 3) and returns its Serve.
func ListenerLimits(t *testing.T, build func(limits config.Limits) func(ctx context.Context, ln net.Listener) error) {
	t.Helper()
	addr := Serve(t, build(listenerLimits))
	healthz := func() error {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get("http://" + addr + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("healthz: %d", resp.StatusCode)
		}
		return nil
	}

	// Slowloris: two senders drip a request's headers a byte at a time.
	// Each is cut within the read timeout (plus slack), while a normal
	// request in the meantime is served.
	var wg sync.WaitGroup
	cut := make(chan time.Duration, 2)
	for range 2 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		wg.Go(func() {
			start := time.Now()
			head := "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 400)
			for i := range len(head) {
				if _, err := conn.Write([]byte{head[i]}); err != nil {
					cut <- time.Since(start)
					return
				}
				// A closed connection shows as a read of EOF (or a reset).
				_ = conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
				var b [1]byte
				if _, err := conn.Read(b[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
					cut <- time.Since(start)
					return
				}
				if time.Since(start) > 20*time.Second {
					return
				}
			}
		})
	}
	if err := healthz(); err != nil {
		t.Errorf("a normal request beside slow senders: %v", err)
	}
	wg.Wait()
	close(cut)
	n := 0
	for d := range cut {
		n++
		if d > 5*time.Second {
			t.Errorf("a slow sender was cut only after %s (read timeout %s)", d, listenerLimits.ReadTimeout)
		}
	}
	if n != 2 {
		t.Fatalf("%d of 2 slow senders were cut", n)
	}

	// The cap: with three connections open, a fourth is refused with a
	// 503 and closed; once they close, requests are served again.
	var open []net.Conn
	for range listenerLimits.MaxConnections {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = extra.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(extra, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(extra), nil)
	if err != nil {
		t.Fatalf("the connection over the cap got no answer: %v", err)
	}
	resp.Body.Close()
	extra.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("the connection over the cap got %d, want 503", resp.StatusCode)
	}
	for _, c := range open {
		c.Close()
	}
	testkit.CheckFor(t, 5*time.Second, 20*time.Millisecond, healthz)
}
