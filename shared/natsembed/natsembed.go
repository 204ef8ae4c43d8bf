// Package natsembed runs nats-server in-process with JetStream on: the
// all-in-one launcher's NATS server (optionally a member of a small
// cluster), and the servers and clusters (StartCluster) the tests and the
// bench tool start. It is the only package that imports
// github.com/nats-io/nats-server, so the standalone service binaries,
// which connect to an external NATS through package bus, do not link the
// server (TestServiceBinariesDoNotLinkServer keeps it that way).
package natsembed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// DefaultListen is where the embedded server listens when no address is
// configured: loopback only, on NATS's usual port, so the nats
// CLI works without flags.
const DefaultListen = "127.0.0.1:4222"

// Options configure Start.
type Options struct {
	// Listen is host:port. An empty host means 127.0.0.1 (never all
	// interfaces unless asked for explicitly); port 0 picks a free port.
	// "" means DefaultListen.
	Listen string
	// StoreDir is the JetStream data directory. Required.
	StoreDir string
	// ServerName names the server in the nats CLI and in logs; "switchyard"
	// when empty.
	ServerName string
	// Log receives nats-server's own log lines (its notices at debug
	// level); nil keeps the server quiet.
	Log *slog.Logger
	// ReadyTimeout bounds the wait for the server to accept clients;
	// 10 s when zero.
	ReadyTimeout time.Duration
	// Cluster, when set, makes the server a member of a NATS cluster
	// (tests and small self-hosted clusters; production clusters run
	// nats-server on their own).
	Cluster *Cluster
}

// Cluster joins an embedded server to a cluster: every member has the
// same Name, a distinct Options.ServerName and StoreDir, and lists the
// members' cluster addresses in Routes.
type Cluster struct {
	// Name of the cluster, identical on every member.
	Name string
	// Listen is the host:port for cluster routes (an empty host means
	// 127.0.0.1).
	Listen string
	// Routes are the cluster addresses of the members (host:port or
	// nats-route://host:port); the server's own address may be listed.
	Routes []string
}

// Start starts an in-process nats-server with JetStream on and waits
// until it accepts connections. Stop it with Stop (or Shutdown followed by
// WaitForShutdown).
func Start(opts Options) (*server.Server, error) {
	if opts.StoreDir == "" {
		return nil, errors.New("natsembed: start embedded NATS: no JetStream store dir (nats.embedded.store_dir)")
	}
	host, port, err := splitListen(opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("natsembed: start embedded NATS: %w", err)
	}
	name := opts.ServerName
	if name == "" {
		name = "switchyard"
	}
	timeout := opts.ReadyTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	sopts := &server.Options{
		ServerName: name,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   opts.StoreDir,
		NoSigs:     true,
		NoLog:      opts.Log == nil,
	}
	if c := opts.Cluster; c != nil {
		if err := applyCluster(sopts, c); err != nil {
			return nil, fmt.Errorf("natsembed: start embedded NATS: %w", err)
		}
	}
	// nats-server reports a busy port or an unusable store dir only in its
	// log and then never becomes ready: check both first for a clear error.
	if err := os.MkdirAll(opts.StoreDir, 0o750); err != nil {
		return nil, fmt.Errorf("natsembed: start embedded NATS: store dir: %w", err)
	}
	if err := checkFree(host, port); err != nil {
		return nil, fmt.Errorf("natsembed: start embedded NATS: %w", err)
	}
	if sopts.Cluster.Port != 0 {
		if err := checkFree(sopts.Cluster.Host, sopts.Cluster.Port); err != nil {
			return nil, fmt.Errorf("natsembed: start embedded NATS: cluster: %w", err)
		}
	}
	s, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("natsembed: start embedded NATS: %w", err)
	}
	if opts.Log != nil {
		l := &serverLog{log: opts.Log.With("component", "nats-server")}
		s.SetLogger(l, opts.Log.Enabled(context.Background(), slog.LevelDebug), false)
	}
	go s.Start()
	if !s.ReadyForConnections(timeout) {
		Stop(s)
		return nil, fmt.Errorf("natsembed: start embedded NATS on %s: not ready after %s (port in use?)",
			net.JoinHostPort(host, strconv.Itoa(port)), timeout)
	}
	return s, nil
}

// Stop shuts s down and waits until it has stopped. It is safe to
// call more than once and with a nil server.
func Stop(s *server.Server) {
	if s == nil {
		return
	}
	s.Shutdown()
	s.WaitForShutdown()
}

// checkFree fails when host:port cannot be bound now (a port other than
// server.RANDOM_PORT).
func checkFree(host string, port int) error {
	if port == server.RANDOM_PORT {
		return nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	_ = ln.Close()
	return nil
}

func applyCluster(sopts *server.Options, c *Cluster) error {
	if c.Name == "" {
		return errors.New("cluster: no name")
	}
	host, port, err := splitListen(c.Listen)
	if err != nil || c.Listen == "" {
		return fmt.Errorf("cluster listen %q: want host:port", c.Listen)
	}
	sopts.Cluster = server.ClusterOpts{Name: c.Name, Host: host, Port: port}
	for _, r := range c.Routes {
		if !strings.Contains(r, "://") {
			r = "nats-route://" + r
		}
		u, err := url.Parse(r)
		if err != nil {
			return fmt.Errorf("cluster route %q: %w", r, err)
		}
		sopts.Routes = append(sopts.Routes, u)
	}
	return nil
}

// splitListen turns "host:port" into nats-server's Host and Port: an empty
// listen is DefaultListen, an empty host is loopback and port 0 is
// server.RANDOM_PORT (nats-server reads Port 0 as its default, 4222).
func splitListen(listen string) (string, int, error) {
	if listen == "" {
		listen = DefaultListen
	}
	host, p, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, fmt.Errorf("listen %q: want host:port: %w", listen, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("listen %q: bad port %q", listen, p)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return host, port, nil
}

// serverLog sends nats-server's log lines to slog. Notices (the startup
// banner, routine lifecycle lines) go out at debug level: warnings and
// errors are what an operator of the embedded server needs to see.
type serverLog struct{ log *slog.Logger }

var _ server.Logger = (*serverLog)(nil)

func (l *serverLog) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLog) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l *serverLog) Fatalf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *serverLog) Errorf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *serverLog) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLog) Tracef(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
