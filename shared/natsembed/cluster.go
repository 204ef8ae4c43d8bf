package natsembed

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ClusterOptions configure StartCluster.
type ClusterOptions struct {
	// Size is the number of members, at least 1.
	Size int
	// Name of the cluster; "switchyard" when empty.
	Name string
	// ServerName prefixes the members' server names: member i is
	// "<ServerName>-<i>" (Name when empty).
	ServerName string
	// StoreDir returns member i's JetStream data directory. Required. It
	// is called again for every attempt, so a start retried with other
	// ports can begin from empty stores (return a new directory on each
	// call for that).
	StoreDir func(member int) string
	// Log receives the members' nats-server log lines, as Options.Log.
	Log *slog.Logger
	// ReadyTimeout bounds the wait for each member to accept clients, as
	// Options.ReadyTimeout.
	ReadyTimeout time.Duration
	// LeaderTimeout bounds the wait for a JetStream meta leader once every
	// member runs; 20 s when zero.
	LeaderTimeout time.Duration
}

// clusterAttempts is how many times StartCluster tries, with new route
// ports each time, before it gives up.
const clusterAttempts = 5

// freeAddr returns a loopback address whose port was free a moment ago.
// A variable for the tests.
var freeAddr = func() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// StartCluster starts a cluster of opts.Size in-process servers with
// JetStream on, on loopback (tests, the bench tool), and waits until the
// cluster has a JetStream meta leader that has heard from every member.
// It returns the members and the Options each was started with:
// Start(members[i]) starts member i again after Stop, with its name,
// route address and store.
//
// Route ports must be known before the members start, as every member
// lists all of them, so they are picked free and then bound: another
// process may take one in between. Such a start is stopped and retried
// with new ports. Client ports are chosen by the OS. On error no member
// is left running.
func StartCluster(opts ClusterOptions) ([]*server.Server, []Options, error) {
	if opts.Size < 1 {
		return nil, nil, fmt.Errorf("natsembed: start cluster: size %d, want at least 1", opts.Size)
	}
	if opts.StoreDir == nil {
		return nil, nil, errors.New("natsembed: start cluster: no StoreDir")
	}
	var errs []error
	for attempt := 1; attempt <= clusterAttempts; attempt++ {
		servers, members, err := startMembers(opts)
		if err != nil {
			errs = append(errs, fmt.Errorf("attempt %d: %w", attempt, err))
			continue
		}
		timeout := opts.LeaderTimeout
		if timeout <= 0 {
			timeout = 20 * time.Second
		}
		if err := waitForMetaLeader(servers, opts.Size, timeout); err != nil {
			stopAll(servers)
			return nil, nil, fmt.Errorf("natsembed: start cluster: %w", err)
		}
		return servers, members, nil
	}
	return nil, nil, fmt.Errorf("natsembed: start cluster: %w", errors.Join(errs...))
}

// startMembers makes one attempt: new route ports, every member started.
func startMembers(opts ClusterOptions) ([]*server.Server, []Options, error) {
	name := opts.Name
	if name == "" {
		name = "switchyard"
	}
	prefix := opts.ServerName
	if prefix == "" {
		prefix = name
	}
	routes := make([]string, opts.Size)
	for i := range routes {
		addr, err := freeAddr()
		if err != nil {
			return nil, nil, fmt.Errorf("route port: %w", err)
		}
		routes[i] = addr
	}
	servers := make([]*server.Server, 0, opts.Size)
	members := make([]Options, opts.Size)
	for i := range members {
		members[i] = Options{
			Listen:       "127.0.0.1:0",
			StoreDir:     opts.StoreDir(i),
			ServerName:   fmt.Sprintf("%s-%d", prefix, i),
			Log:          opts.Log,
			ReadyTimeout: opts.ReadyTimeout,
			Cluster:      &Cluster{Name: name, Listen: routes[i], Routes: routes},
		}
		s, err := Start(members[i])
		if err != nil {
			stopAll(servers)
			return nil, nil, fmt.Errorf("member %d: %w", i, err)
		}
		servers = append(servers, s)
	}
	return servers, members, nil
}

// waitForMetaLeader waits until a member leads the JetStream meta group
// and has heard from every member: until then, creating a stream with
// as many replicas as members fails with "no suitable peers for
// placement".
func waitForMetaLeader(servers []*server.Server, size int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		leader, peers := false, 0
		for _, s := range servers {
			if s.JetStreamIsLeader() {
				leader, peers = true, len(s.JetStreamClusterPeers())
				break
			}
		}
		if leader && peers >= size {
			return nil
		}
		if time.Now().After(deadline) {
			if !leader {
				return fmt.Errorf("no JetStream meta leader after %s", timeout)
			}
			return fmt.Errorf("JetStream meta leader knows %d of %d members after %s", peers, size, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func stopAll(servers []*server.Server) {
	for _, s := range servers {
		Stop(s)
	}
}
