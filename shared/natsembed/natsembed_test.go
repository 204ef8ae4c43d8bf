package natsembed

import (
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/goleak"

	"switchyard.dev/shared/testkit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStart(t *testing.T) {
	var logs testkit.SyncBuffer
	s, err := Start(Options{
		Listen:     "127.0.0.1:0",
		StoreDir:   t.TempDir(),
		ServerName: "test-sw",
		Log:        slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if !s.JetStreamEnabled() {
		t.Error("JetStream is off")
	}
	if got := s.Name(); got != "test-sw" {
		t.Errorf("server name = %q, want test-sw", got)
	}
	addr, ok := s.Addr().(*net.TCPAddr)
	if !ok || !addr.IP.IsLoopback() || addr.Port == 0 || addr.Port == 4222 {
		t.Errorf("listening on %v, want loopback on a random port", s.Addr())
	}
	if !strings.Contains(logs.String(), "nats-server") {
		t.Errorf("server log lines not routed to slog: %q", logs.String())
	}
	Stop(s)
	Stop(s) // idempotent
	Stop(nil)
}

// takenAddr returns a loopback address a listener holds until the test
// ends.
func takenAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().String()
}

func TestStartErrors(t *testing.T) {
	busy := takenAddr(t)
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{name: "no store dir", opts: Options{Listen: "127.0.0.1:0"}, want: "store dir"},
		{name: "no port", opts: Options{Listen: "127.0.0.1", StoreDir: t.TempDir()}, want: "host:port"},
		{name: "bad port", opts: Options{Listen: "127.0.0.1:http", StoreDir: t.TempDir()}, want: "bad port"},
		{name: "port in use", opts: Options{Listen: busy, StoreDir: t.TempDir()}, want: "address already in use"},
		{name: "cluster port in use", opts: Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir(), Cluster: &Cluster{Name: "c", Listen: busy}}, want: "cluster: listen tcp"},
		{name: "cluster without a name", opts: Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir(), Cluster: &Cluster{Listen: "127.0.0.1:0"}}, want: "cluster: no name"},
		{name: "cluster without a listen address", opts: Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir(), Cluster: &Cluster{Name: "c"}}, want: "cluster listen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Start(tt.opts)
			if err == nil {
				Stop(s)
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

func TestSplitListen(t *testing.T) {
	tests := []struct {
		name     string
		listen   string
		wantHost string
		wantPort int
	}{
		{name: "default", listen: "", wantHost: "127.0.0.1", wantPort: 4222},
		{name: "empty host is loopback", listen: ":4333", wantHost: "127.0.0.1", wantPort: 4333},
		{name: "port 0 is random", listen: "127.0.0.1:0", wantHost: "127.0.0.1", wantPort: server.RANDOM_PORT},
		{name: "explicit all interfaces", listen: "0.0.0.0:4222", wantHost: "0.0.0.0", wantPort: 4222},
		{name: "ipv6", listen: "[::1]:4222", wantHost: "::1", wantPort: 4222},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host, port, err := splitListen(tt.listen)
			if err != nil {
				t.Fatal(err)
			}
			if host != tt.wantHost || port != tt.wantPort {
				t.Fatalf("splitListen(%q) = %q, %d; want %q, %d", tt.listen, host, port, tt.wantHost, tt.wantPort)
			}
		})
	}
}
