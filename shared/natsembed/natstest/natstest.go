// Package natstest starts embedded NATS servers for tests (package
// natsembed, stopped when the test ends).
package natstest

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/goleak"

	"switchyard.dev/shared/natsembed"
)

// Start runs an embedded nats-server with JetStream on listen
// ("127.0.0.1:0": a free port) storing in dir (tb.TempDir() when ""),
// stopped when the test ends.
func Start(tb testing.TB, listen, dir string) *server.Server {
	tb.Helper()
	if dir == "" {
		dir = tb.TempDir()
	}
	s, err := natsembed.Start(natsembed.Options{Listen: listen, StoreDir: dir})
	if err != nil {
		tb.Fatalf("natsembed.Start: %v", err)
	}
	tb.Cleanup(func() { natsembed.Stop(s) })
	return s
}

// VerifyTestMain runs the package's tests (goleak.VerifyTestMain) and fails
// them when goroutines outlive them, but for nats.go's deletion of a reset
// or replaced ordered consumer: it runs in a goroutine that ends with its
// request timeout, not ours to wait for. opts ignore more.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	opts = append([]goleak.Option{goleak.IgnoreAnyFunction("github.com/nats-io/nats.go.(*js).DeleteConsumer")}, opts...)
	goleak.VerifyTestMain(m, opts...)
}
