package natsembed

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/testkit"
)

// TestStartCluster: three members on loopback with distinct names, the
// caller's store dirs, route addresses as listed in the returned Options
// and OS-chosen client ports; the cluster has a meta leader and takes an
// R3 stream at once, and a member stopped and started again with its Options
// rejoins it.
func TestStartCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test in -short mode")
	}
	var dirs []string
	servers, members, err := StartCluster(ClusterOptions{
		Size: 3,
		Name: "natsembed-test",
		StoreDir: func(int) string {
			dirs = append(dirs, t.TempDir())
			return dirs[len(dirs)-1]
		},
	})
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	defer func() { stopAll(servers) }()
	if len(servers) != 3 || len(members) != 3 || len(dirs) != 3 {
		t.Fatalf("%d servers, %d options, %d store dirs; want 3 each", len(servers), len(members), len(dirs))
	}
	leaders := 0
	for i, s := range servers {
		if want := fmt.Sprintf("natsembed-test-%d", i); s.Name() != want || members[i].ServerName != want {
			t.Errorf("member %d: name %q, options %q; want %q", i, s.Name(), members[i].ServerName, want)
		}
		if s.ClusterName() != "natsembed-test" || !s.JetStreamEnabled() || !s.JetStreamIsClustered() {
			t.Errorf("member %d: cluster %q, JetStream %v, clustered %v", i, s.ClusterName(), s.JetStreamEnabled(), s.JetStreamIsClustered())
		}
		if members[i].StoreDir != dirs[i] {
			t.Errorf("member %d: store dir %q, want %q", i, members[i].StoreDir, dirs[i])
		}
		if addr, ok := s.Addr().(*net.TCPAddr); !ok || !addr.IP.IsLoopback() || addr.Port == 0 || addr.Port == 4222 {
			t.Errorf("member %d: clients on %v, want loopback on a random port", i, s.Addr())
		}
		route := s.ClusterAddr()
		if route == nil || !route.IP.IsLoopback() || route.String() != members[i].Cluster.Listen {
			t.Errorf("member %d: routes on %v, options %q", i, route, members[i].Cluster.Listen)
		}
		if len(members[i].Cluster.Routes) != 3 {
			t.Errorf("member %d: routes %q", i, members[i].Cluster.Routes)
		}
		if s.JetStreamIsLeader() {
			leaders++
		}
	}
	if leaders == 0 {
		t.Error("no JetStream meta leader")
	}

	_, js := testkit.ConnectNATS(t, servers[0].ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// At once: a leader that has not heard from every member yet refuses
	// an R3 stream ("no suitable peers for placement").
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3"}, Replicas: 3}); err != nil {
		t.Fatalf("R3 stream right after StartCluster: %v", err)
	}

	Stop(servers[2])
	if servers[2], err = Start(members[2]); err != nil {
		t.Fatalf("start member 2 again: %v", err)
	}
	if s := servers[2]; s.Name() != "natsembed-test-2" || s.ClusterAddr().String() != members[2].Cluster.Listen {
		t.Errorf("member 2 again: name %q, routes on %v", s.Name(), s.ClusterAddr())
	}
	testkit.WaitFor(t, 20*time.Second, servers[2].JetStreamIsCurrent)
}

// TestStartClusterRetriesTakenRoutePort: a route port taken between its
// pick and its bind makes StartCluster start again with new ports.
func TestStartClusterRetriesTakenRoutePort(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test in -short mode")
	}
	busy := takenAddr(t)
	picks := 0
	pick := freeAddr
	defer func() { freeAddr = pick }()
	freeAddr = func() (string, error) {
		picks++
		if picks == 2 {
			return busy, nil
		}
		return pick()
	}
	start := time.Now()
	servers, members, err := StartCluster(ClusterOptions{Size: 3, StoreDir: func(int) string { return t.TempDir() }})
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	defer stopAll(servers)
	if picks != 6 {
		t.Errorf("%d route ports picked, want 6 (two attempts)", picks)
	}
	for i, m := range members {
		if m.Cluster.Listen == busy {
			t.Errorf("member %d kept the taken route port %s", i, m.Cluster.Listen)
		}
		if want := fmt.Sprintf("switchyard-%d", i); servers[i].Name() != want {
			t.Errorf("member %d: name %q, want %q", i, servers[i].Name(), want)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s: the taken port was not noticed before the ready timeout", d)
	}
}

func TestStartClusterErrors(t *testing.T) {
	busy := takenAddr(t)
	tests := []struct {
		name string
		opts ClusterOptions
		pick func() (string, error)
		want []string
	}{
		{name: "no members", opts: ClusterOptions{StoreDir: func(int) string { return t.TempDir() }}, want: []string{"size 0"}},
		{name: "no store dir", opts: ClusterOptions{Size: 3}, want: []string{"no StoreDir"}},
		{
			name: "route ports always taken",
			opts: ClusterOptions{Size: 3, StoreDir: func(int) string { return t.TempDir() }},
			pick: func() (string, error) { return busy, nil },
			want: []string{"attempt 1: member 0", "attempt 5: member 0", "address already in use"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.pick != nil {
				pick := freeAddr
				defer func() { freeAddr = pick }()
				freeAddr = tt.pick
			}
			servers, _, err := StartCluster(tt.opts)
			stopAll(servers)
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("StartCluster error %v, want one mentioning %q", err, w)
				}
			}
		})
	}
}
