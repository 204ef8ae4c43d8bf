package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/holdkv"
	"switchyard.dev/shared/natsembed"
)

// This file holds the NATS side of the hold-plane mode: the NATS child
// process (one server, or a 3-node cluster in one process) and the preload
// of the holds present, written straight to switchyard_holds.

// serveNATSChild runs the hold-plane mode's NATS: size 1 is one embedded
// server, size 3 a cluster (natsembed.StartCluster); dir holds the stores,
// and the client URLs, comma-separated, are written to dir/urls once every
// member serves.
func serveNATSChild(ctx context.Context, dir string, size int) error {
	var servers []*server.Server
	if size <= 1 {
		s, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: filepath.Join(dir, "store")})
		if err != nil {
			return err
		}
		servers = []*server.Server{s}
	} else {
		n := 0
		ss, _, err := natsembed.StartCluster(natsembed.ClusterOptions{Size: size, ServerName: "bench",
			StoreDir: func(i int) string { n++; return filepath.Join(dir, fmt.Sprintf("store-%d-%d", i, n)) }})
		if err != nil {
			return err
		}
		servers = ss
	}
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.ClientURL()
	}
	if err := os.WriteFile(filepath.Join(dir, "urls.tmp"), []byte(strings.Join(urls, ",")), 0o600); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(dir, "urls.tmp"), filepath.Join(dir, "urls")); err != nil {
		return err
	}
	<-ctx.Done()
	for _, s := range servers {
		natsembed.Stop(s)
	}
	return nil
}

// natsURLs waits for the NATS child's dir/urls file.
func natsURLs(ctx context.Context, c *child, dir string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "urls")); err == nil {
			return string(b), nil
		}
		select {
		case <-c.done:
			return "", fmt.Errorf("nats child exited: %v\n%s", c.err, c.logs)
		case <-ctx.Done():
			return "", fmt.Errorf("nats child: no client URLs: %w\n%s", ctx.Err(), c.logs)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// pinRecord is the record hold.Engine.Pin writes for a provider+model
// pin: what the admin API stores.
func pinRecord(provider, model string, now time.Time, until time.Time) hold.Record {
	sc := hold.Scope{Kind: hold.ScopeProviderModel, Provider: provider, Model: model}
	return hold.Record{
		Version: hold.SchemaVersion, ID: sc.ID(), Scope: sc, State: hold.StateHeld,
		Reason: "bench preload (pinned by bench)", Code: "pinned", Source: hold.SourceAdmin,
		RecordedBy: "bench-preload", RecordedAt: now, Since: now, Until: until, Pinned: true,
	}
}

// preloadHolds sets the buckets up (replicas as the services will) and
// writes n pins of provider+model scopes preModel(i) to switchyard_holds,
// in the record format of shared/holdkv, with asynchronous publishes.
func preloadHolds(ctx context.Context, urls string, replicas, n int, provider string, model func(int) string) error {
	nc, err := nats.Connect(urls)
	if err != nil {
		return fmt.Errorf("preload: connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return err
	}
	if err := bus.WaitForJetStream(ctx, js); err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	res, err := bus.Setup(ctx, js, bus.SetupOptions{Replicas: replicas})
	if err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	prefix := "$KV." + res.Holds.Bucket() + "."
	now := time.Now()
	until := now.Add(6 * time.Hour)
	for i := range n {
		rec := pinRecord(provider, model(i), now, until)
		key, data, err := holdkv.Encode(rec)
		if err != nil {
			return err
		}
		if _, err := js.PublishAsync(prefix+key, data, jetstream.WithStallWait(time.Minute)); err != nil {
			return fmt.Errorf("preload: publish %s: %w", key, err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(5 * time.Minute):
		return errors.New("preload: publishes not acknowledged within 5 minutes")
	}
	st, err := res.Holds.Status(ctx)
	if err != nil {
		return err
	}
	if got := st.Values(); got < uint64(n) {
		return fmt.Errorf("preload: bucket holds %d values, want %d", got, n)
	}
	return nil
}
