package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/natsembed"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// TestReadinessNoQuorum restarts cluster nodes while streams are
		// being placed: now and then nats-server (v2.15) leaves the file
		// store flush loops of such a stream, and its access-time ticker,
		// running after Shutdown and WaitForShutdown returned (seen in
		// about 1 run in 4 under -race; never with the other tests alone).
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"),
	)
}

func startTestServer(t *testing.T) *server.Server {
	t.Helper()
	s, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("natsembed.Start: %v", err)
	}
	t.Cleanup(func() { natsembed.Stop(s) })
	return s
}

func TestConnect(t *testing.T) {
	s := startTestServer(t)
	var logs testkit.SyncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	cfg := config.NATS{URL: " " + s.ClientURL() + " , ", Name: "from-config", Timeout: time.Second}
	nc, err := Connect(context.Background(), cfg, log, nats.Name("override"))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer nc.Close()
	if !nc.IsConnected() {
		t.Fatal("not connected")
	}
	if nc.Opts.Name != "override" {
		t.Errorf("name = %q, want the caller's override", nc.Opts.Name)
	}
	if nc.Opts.MaxReconnect != -1 || !nc.Opts.RetryOnFailedConnect || nc.Opts.Timeout != time.Second {
		t.Errorf("options: MaxReconnect=%d RetryOnFailedConnect=%v Timeout=%s",
			nc.Opts.MaxReconnect, nc.Opts.RetryOnFailedConnect, nc.Opts.Timeout)
	}
	sub, err := nc.SubscribeSync("t.x")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("t.x", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.NextMsg(5 * time.Second)
	if err != nil || string(msg.Data) != "hi" {
		t.Fatalf("round trip: %v %v", msg, err)
	}
	testkit.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if !strings.Contains(logs.String(), "connected to NATS") {
			return &missingLog{"connected to NATS"}
		}
		return nil
	})
}

func TestConnectCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Connect(ctx, config.NATS{URL: "nats://127.0.0.1:1"}, nil); err == nil {
		t.Fatal("Connect with a cancelled context succeeded")
	}
}

func TestConnectWhileServerDown(t *testing.T) {
	// Find a free port, then start a server on it only after connecting.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	var logs testkit.SyncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	nc, err := Connect(context.Background(), config.NATS{URL: "nats://" + addr, Timeout: 200 * time.Millisecond}, log)
	if err != nil {
		t.Fatalf("Connect with NATS down: %v", err)
	}
	defer nc.Close()
	if nc.IsConnected() {
		t.Fatal("connected to nothing")
	}
	if !strings.Contains(logs.String(), "retrying") {
		t.Errorf("no retry log line: %s", logs.String())
	}

	s, err := natsembed.Start(natsembed.Options{Listen: addr, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("natsembed.Start: %v", err)
	}
	defer natsembed.Stop(s)
	testkit.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		if !nc.IsConnected() {
			return errNotConnected
		}
		return nil
	})

	// Server restart: the connection notices, then comes back.
	natsembed.Stop(s)
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if nc.IsConnected() {
			return errConnected
		}
		return nil
	})
	s2, err := natsembed.Start(natsembed.Options{Listen: addr, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer natsembed.Stop(s2)
	testkit.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		if !nc.IsConnected() {
			return errNotConnected
		}
		return nil
	})
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		out := logs.String()
		for _, want := range []string{"disconnected from NATS", "reconnected to NATS"} {
			if !strings.Contains(out, want) {
				return &missingLog{want}
			}
		}
		return nil
	})
}

func TestConnectAuth(t *testing.T) {
	const user, password, token = "sw", "p4ss-w0rd-secret", "t0ken-secret"
	tests := []struct {
		name      string
		server    server.Options
		cfg       config.NATS
		wantReady bool
	}{
		{
			name:      "user and password",
			server:    server.Options{Username: user, Password: password},
			cfg:       config.NATS{User: user, PasswordValue: config.NewSecret(password)},
			wantReady: true,
		},
		{
			name:      "token",
			server:    server.Options{Authorization: token},
			cfg:       config.NATS{TokenValue: config.NewSecret(token)},
			wantReady: true,
		},
		{
			name:   "wrong password",
			server: server.Options{Username: user, Password: "other"},
			cfg:    config.NATS{User: user, PasswordValue: config.NewSecret(password)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.server
			o.Host, o.Port, o.NoSigs, o.NoLog = "127.0.0.1", server.RANDOM_PORT, true, true
			s, err := server.NewServer(&o)
			if err != nil {
				t.Fatal(err)
			}
			go s.Start()
			defer natsembed.Stop(s)
			if !s.ReadyForConnections(10 * time.Second) {
				t.Fatal("server not ready")
			}
			var logs testkit.SyncBuffer
			log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			cfg := tt.cfg
			cfg.URL = s.ClientURL()
			cfg.Timeout = 500 * time.Millisecond
			nc, err := Connect(context.Background(), cfg, log)
			if err != nil {
				t.Fatalf("Connect: %v", err)
			}
			if got := nc.IsConnected(); got != tt.wantReady {
				t.Errorf("connected = %v, want %v", got, tt.wantReady)
			}
			nc.Close()
			out := logs.String()
			for _, secret := range []string{password, token} {
				if strings.Contains(out, secret) {
					t.Errorf("a secret was logged: %s", out)
				}
			}
		})
	}
}

func TestOptionsErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  config.NATS
		want string
	}{
		{name: "password without user", cfg: config.NATS{PasswordValue: config.NewSecret("x")}, want: "nats.user"},
		{name: "user and token", cfg: config.NATS{User: "u", TokenValue: config.NewSecret("x")}, want: "not both"},
		{name: "cert without key", cfg: config.NATS{TLS: config.TLS{CertFile: "c.pem"}}, want: "key_file"},
		{name: "missing CA file", cfg: config.NATS{TLS: config.TLS{CAFile: "/nonexistent/ca.pem"}}, want: "ca.pem"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.URL = "nats://127.0.0.1:1"
			nc, err := Connect(context.Background(), cfg, nil)
			if err == nil {
				nc.Close()
				t.Fatal("Connect succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

func TestConnectEmptyURL(t *testing.T) {
	if _, err := Connect(context.Background(), config.NATS{URL: " , "}, nil); err == nil || !strings.Contains(err.Error(), "nats.url") {
		t.Fatalf("Connect with no URL: %v", err)
	}
}

func TestRedact(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{name: "plain", in: "nats://127.0.0.1:4222", want: "nats://127.0.0.1:4222"},
		{name: "user and password", in: "nats://u:secret@h:4222", want: "nats://redacted@h:4222"},
		{name: "token", in: "nats://secret@h:4222", want: "nats://redacted@h:4222"},
		{name: "list", in: "nats://a:1, nats://u:p@b:2", want: "nats://a:1,nats://redacted@b:2"},
		{name: "unparsable", in: "nats://u:%zz@h:1", want: "nats://redacted@h:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Redact(tt.in); got != tt.want {
				t.Fatalf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

type missingLog struct{ want string }

func (m *missingLog) Error() string { return "log line missing: " + m.want }

type connErr string

func (e connErr) Error() string { return string(e) }

const (
	errNotConnected = connErr("not connected")
	errConnected    = connErr("still connected")
)

func TestDrain(t *testing.T) {
	s := startTestServer(t)
	nc, err := Connect(context.Background(), config.NATS{URL: s.ClientURL()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	if _, err := nc.Subscribe("t.drain", func(m *nats.Msg) { got <- string(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("t.drain", []byte("last")); err != nil {
		t.Fatal(err)
	}
	if err := Drain(nc, 5*time.Second); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if !nc.IsClosed() {
		t.Fatal("connection not closed after Drain")
	}
	if msg := <-got; msg != "last" {
		t.Fatalf("message lost in drain: %q", msg)
	}
	if err := Drain(nc, time.Second); err != nil {
		t.Fatalf("second Drain: %v", err)
	}
	if err := Drain(nil, time.Second); err != nil {
		t.Fatalf("Drain(nil): %v", err)
	}

	down, err := Connect(context.Background(), config.NATS{URL: "nats://127.0.0.1:1", Timeout: 100 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := Drain(down, time.Second); err != nil || !down.IsClosed() {
		t.Fatalf("Drain of a reconnecting connection: %v, closed %v", err, down.IsClosed())
	}
}

// A NATS outage logs one WARN per watcher, not an ERROR on every retry;
// other asynchronous errors stay ERRORs; a reconnect resets.
func TestAsyncErrorsDuringAnOutage(t *testing.T) {
	var buf testkit.SyncBuffer
	a := &asyncErrors{log: slog.New(slog.NewTextHandler(&buf, nil))}
	sub := &nats.Subscription{Subject: "$KV.switchyard_holds.>"}
	for range 20 {
		a.handle(nil, sub, nats.ErrConsumerNotActive)
	}
	a.handle(nil, sub, errors.New("permissions violation"))
	out := buf.String()
	if n := strings.Count(out, "level=WARN"); n != 1 {
		t.Errorf("%d WARN lines for 20 outage errors, want 1:\n%s", n, out)
	}
	if strings.Count(out, "level=ERROR") != 1 || !strings.Contains(out, "permissions violation") {
		t.Errorf("other errors are ERRORs:\n%s", out)
	}
	a.reset()
	a.handle(nil, sub, nats.ErrConsumerNotActive)
	if n := strings.Count(buf.String(), "level=WARN"); n != 2 {
		t.Errorf("after a reconnect the next outage is logged again: %d WARN lines", n)
	}
}

// TestReconnectAfterRefusedCredentials: a server that refuses the
// service's credentials for a while (a password rotated on one server
// first, a creds file replaced late) does not end the connection: it
// reconnects once they are accepted again.
func TestReconnectAfterRefusedCredentials(t *testing.T) {
	const user, good = "sw", "good-password"
	addr := testkit.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	start := func(password string) *server.Server {
		o := server.Options{Username: user, Password: password, Host: "127.0.0.1", NoSigs: true, NoLog: true}
		o.Port, _ = strconv.Atoi(port)
		s, err := server.NewServer(&o)
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("server not ready")
		}
		return s
	}
	s := start(good)
	cfg := config.NATS{User: user, PasswordValue: config.NewSecret(good), Timeout: time.Second}
	opts, err := Options(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int32
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrAuthorization) {
			refused.Add(1) // nats.go reports each refused reconnect here
		}
	}))
	nc, err := nats.Connect("nats://"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	natsembed.Stop(s)
	s = start("rotated-elsewhere")
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := refused.Load(); n < 3 {
			return fmt.Errorf("%d reconnects refused (closed %v)", n, nc.IsClosed())
		}
		return nil
	})
	natsembed.Stop(s)
	s = start(good)
	defer natsembed.Stop(s)
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if !nc.IsConnected() {
			return fmt.Errorf("status %s", nc.Status())
		}
		return nil
	})
}

// TestSilentServerIsLeft: a server that stops answering without closing
// the connection (power loss, a partition) is taken for dead after two
// unanswered pings, and the service moves to another server.
func TestSilentServerIsLeft(t *testing.T) {
	s := startTestServer(t)
	// A relay in front of the server that can go silent: it keeps the
	// connection open and stops passing bytes.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var silent atomic.Bool
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", s.Addr().String())
			if err != nil {
				c.Close()
				continue
			}
			pass := func(dst, src net.Conn) {
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if err != nil {
						dst.Close()
						return
					}
					if !silent.Load() {
						_, _ = dst.Write(buf[:n])
					}
				}
			}
			go pass(up, c)
			go pass(c, up)
		}
	}()
	relay := "nats://" + ln.Addr().String()
	cfg := config.NATS{Timeout: time.Second, PingInterval: 100 * time.Millisecond}
	opts, err := Options(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(relay+","+s.ClientURL(), append(opts, nats.DontRandomize())...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if got := nc.ConnectedUrl(); got != relay {
		t.Fatalf("connected to %s, want the relay first", got)
	}
	silent.Store(true)
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if got := nc.ConnectedUrl(); got != s.ClientURL() || !nc.IsConnected() {
			return fmt.Errorf("connected to %q (%s)", got, nc.Status())
		}
		return nil
	})
}
