package natstest

import (
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"switchyard.dev/shared/natsembed"
)

// Cluster is a cluster of embedded nats-servers on loopback
// (natsembed.StartCluster), every member stopped when the test ends.
type Cluster struct {
	// Servers are the members, member i at index i (Restart replaces one).
	Servers []*server.Server
	// Options are what member i was started with: Restart starts it again
	// with its name, route address and store.
	Options []natsembed.Options
	urls    []string
}

// StartCluster starts a cluster of opts.Size members and waits for its
// JetStream meta leader (natsembed.StartCluster). Each member stores in
// its own tb.TempDir() unless opts.StoreDir says otherwise.
func StartCluster(tb testing.TB, opts natsembed.ClusterOptions) *Cluster {
	tb.Helper()
	if opts.StoreDir == nil {
		opts.StoreDir = func(int) string { return tb.TempDir() }
	}
	servers, members, err := natsembed.StartCluster(opts)
	if err != nil {
		tb.Fatalf("natsembed.StartCluster: %v", err)
	}
	c := &Cluster{Servers: servers, Options: members}
	for _, s := range servers {
		c.urls = append(c.urls, s.ClientURL())
	}
	tb.Cleanup(func() {
		for _, s := range c.Servers {
			natsembed.Stop(s)
		}
	})
	return c
}

// URLsFrom lists every member's client URL, member i first: with
// nats.DontRandomize a client connects to member i and fails over to the
// others.
func (c *Cluster) URLsFrom(i int) string {
	urls := append([]string{c.urls[i]}, c.urls[:i]...)
	urls = append(urls, c.urls[i+1:]...)
	return strings.Join(urls, ",")
}

// Index is the index of the member called name (a stream's leader, say),
// -1 when none is.
func (c *Cluster) Index(name string) int {
	for i, s := range c.Servers {
		if s.Name() == name {
			return i
		}
	}
	return -1
}

// Restart starts member i again after natsembed.Stop, with the options it
// was first started with.
func (c *Cluster) Restart(tb testing.TB, i int) {
	tb.Helper()
	s, err := natsembed.Start(c.Options[i])
	if err != nil {
		tb.Fatalf("restart member %d: %v", i, err)
	}
	c.Servers[i] = s
}
