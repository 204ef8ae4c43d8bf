package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"switchyard.dev/shared/config"
)

// DefaultReconnectWait is the pause between reconnect attempts to the same
// server (nats.go adds up to 100 ms of jitter). It is short so that a
// restarted server is found again well within a second: watchers and
// writers resume as soon as the connection is back.
const DefaultReconnectWait = 250 * time.Millisecond

// MaxPingsOutstanding is how many pings may go unanswered before a
// connection is taken for dead (nats.ping_interval apart).
const MaxPingsOutstanding = 2

// Connect opens a connection to NATS as configured in cfg: the server list
// (comma-separated), user/password or token (the resolved PasswordValue /
// TokenValue), creds file, TLS, client name and connect timeout.
//
// The connection reconnects forever and is returned even when no server is
// reachable yet (RetryOnFailedConnect): a service starts while NATS is down
// and reports itself not ready until the connection is up. Disconnects,
// reconnects and asynchronous errors are logged on log; URLs are logged
// without credentials and secrets never are.
//
// opts are applied after the options built from cfg, so a caller can
// override any of them (nats.Name, say).
func Connect(ctx context.Context, cfg config.NATS, log *slog.Logger, opts ...nats.Option) (*nats.Conn, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	urls, err := serverList(cfg.URL)
	if err != nil {
		return nil, err
	}
	nopts, err := Options(cfg, log)
	if err != nil {
		return nil, err
	}
	nopts = append(nopts, opts...)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bus: connect to NATS %s: %w", Redact(urls), err)
	}
	nc, err := nats.Connect(urls, nopts...)
	if err != nil {
		return nil, fmt.Errorf("bus: connect to NATS %s: %w", Redact(urls), err)
	}
	if err := ctx.Err(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("bus: connect to NATS %s: %w", Redact(urls), err)
	}
	// A successful connect is logged by the ConnectHandler (nats.go calls
	// it for the first connect with RetryOnFailedConnect on).
	if !nc.IsConnected() {
		log.Warn("NATS not reachable yet; retrying in the background", "servers", Redact(urls), "name", nc.Opts.Name)
	}
	return nc, nil
}

// Options builds the nats.Options of Connect from cfg, without the server
// URLs.
func Options(cfg config.NATS, log *slog.Logger) ([]nats.Option, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	name := cfg.Name
	if name == "" {
		name = "switchyard"
	}
	async := &asyncErrors{log: log}
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(DefaultReconnectWait),
		nats.RetryOnFailedConnect(true),
		// A refused credential while a secret rotates (a creds file
		// replaced, one server with the new password first) must not end
		// the connection for good: nats.go gives up after the same
		// authentication error twice unless told not to.
		nats.IgnoreAuthErrorAbort(),
		nats.ConnectHandler(func(nc *nats.Conn) {
			log.Info("connected to NATS", "url", nc.ConnectedUrlRedacted(), "name", nc.Opts.Name)
		}),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS", "err", err)
				return
			}
			log.Info("disconnected from NATS")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("reconnected to NATS", "url", nc.ConnectedUrlRedacted())
			async.reset()
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			if err := nc.LastError(); err != nil {
				log.Warn("NATS connection closed", "err", err)
				return
			}
			log.Debug("NATS connection closed")
		}),
		nats.ErrorHandler(async.handle),
	}
	if cfg.Timeout > 0 {
		opts = append(opts, nats.Timeout(cfg.Timeout))
	}
	if cfg.PingInterval > 0 {
		// nats.go's default (2 minutes, 2 outstanding) notices a server
		// that went silent after four to six minutes, and meanwhile the
		// connection looks up: writes time out, events are lost.
		opts = append(opts, nats.PingInterval(cfg.PingInterval), nats.MaxPingsOutstanding(MaxPingsOutstanding))
	}
	switch {
	case cfg.User != "":
		opts = append(opts, nats.UserInfo(cfg.User, cfg.PasswordValue.Reveal()))
	case !cfg.PasswordValue.IsZero():
		return nil, errors.New("bus: nats.password is set without nats.user")
	}
	if !cfg.TokenValue.IsZero() {
		if cfg.User != "" {
			return nil, errors.New("bus: set either nats.user/password or nats.token, not both")
		}
		opts = append(opts, nats.Token(cfg.TokenValue.Reveal()))
	}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.TLS.CAFile != "" {
		opts = append(opts, nats.RootCAs(cfg.TLS.CAFile))
	}
	switch {
	case cfg.TLS.CertFile != "" && cfg.TLS.KeyFile != "":
		opts = append(opts, nats.ClientCert(cfg.TLS.CertFile, cfg.TLS.KeyFile))
	case cfg.TLS.CertFile != "" || cfg.TLS.KeyFile != "":
		return nil, errors.New("bus: nats.tls.cert_file and nats.tls.key_file go together")
	}
	return opts, nil
}

// serverList normalises a comma-separated list of NATS URLs.
func serverList(list string) (string, error) {
	var urls []string
	for u := range strings.SplitSeq(list, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 {
		return "", errors.New("bus: nats.url is empty")
	}
	return strings.Join(urls, ","), nil
}

// Redact returns a comma-separated URL list with any user info (user,
// password or token) replaced by "redacted", fit for logs.
func Redact(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if !strings.Contains(p, "@") {
			parts[i] = p
			continue
		}
		u, err := url.Parse(p)
		if err != nil || u.User == nil {
			// Unparsable but carries an '@': drop the user info.
			scheme, rest := "", p
			if i := strings.Index(p, "://"); i >= 0 {
				scheme, rest = p[:i+3], p[i+3:]
			}
			parts[i] = scheme + "redacted@" + rest[strings.LastIndex(rest, "@")+1:]
			continue
		}
		u.User = url.User("redacted")
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}

// Drain drains nc (pending publishes are flushed, subscriptions finish
// their messages) and waits until it is closed, at most timeout, then
// closes it. A connection that is not connected is closed at once. A nil
// connection is fine.
func Drain(nc *nats.Conn, timeout time.Duration) error {
	if nc == nil || nc.IsClosed() {
		return nil
	}
	if !nc.IsConnected() {
		nc.Close()
		return nil
	}
	if err := nc.Drain(); err != nil {
		nc.Close()
		return fmt.Errorf("bus: drain NATS connection: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for !nc.IsClosed() {
		if time.Now().After(deadline) {
			nc.Close()
			return fmt.Errorf("bus: drain NATS connection: not done after %s", timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// asyncErrors logs the client's asynchronous errors. What an outage
// causes by itself (a watcher's consumer not active, missed heartbeats)
// is a WARN once per subscription until the connection is back, not an
// ERROR on every retry; anything else is an ERROR.
type asyncErrors struct {
	log  *slog.Logger
	mu   sync.Mutex
	seen map[string]bool
}

func (a *asyncErrors) handle(_ *nats.Conn, sub *nats.Subscription, err error) {
	subject := ""
	if sub != nil {
		subject = sub.Subject
	}
	if !outageError(err) {
		a.log.Error("NATS async error", "subject", subject, "err", err)
		return
	}
	key := subject + "\x00" + err.Error()
	a.mu.Lock()
	first := !a.seen[key]
	if a.seen == nil {
		a.seen = map[string]bool{}
	}
	a.seen[key] = true
	a.mu.Unlock()
	if first {
		a.log.Warn("NATS watcher interrupted (repeats are not logged until NATS is back)", "subject", subject, "err", err)
	}
}

func (a *asyncErrors) reset() {
	a.mu.Lock()
	a.seen = nil
	a.mu.Unlock()
}

// outageError reports whether err is what a NATS outage or a leader
// election causes to a consumer by itself.
func outageError(err error) bool {
	return errors.Is(err, nats.ErrConsumerNotActive) || errors.Is(err, nats.ErrNoHeartbeat) ||
		strings.Contains(err.Error(), "consumer not active") || strings.Contains(err.Error(), "heartbeat")
}
