package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Peers are other gateways measured beside Switchyard, on the same
// upstream and load. They are installed on demand, only when asked for
// (-peers, or a peer's name in -targets), into a cache directory outside
// the repository, and are never a test dependency.

// knownPeers are the peers the bench can run, in the order they are named.
var knownPeers = []string{"portkey"}

// peer is how the bench runs one peer gateway and points it at the
// upstream: start its process; single is the peer serving with one key,
// fallback the peer configured to try keys in order with its own
// fallback mechanism.
type peer struct {
	start    func(ctx context.Context, o options, dir string) (*child, error)
	single   func(c *child, upstreamURL, key string) target
	fallback func(c *child, upstreamURL string, keys ...string) target
}

// isPeer reports whether name is a known peer.
func isPeer(name string) bool {
	_, ok := peers[name]
	return ok
}

// peers are the known peers by name.
var peers = map[string]peer{
	"portkey": {start: startPortkey, single: portkeyTarget, fallback: portkeyFallbackTarget},
}

// parsePeers reads -peers: a comma list of known peers.
func parsePeers(s string) ([]string, error) {
	var out []string
	for _, p := range splitList(s) {
		if !isPeer(p) {
			return nil, fmt.Errorf("unknown peer %q (want %s)", p, strings.Join(knownPeers, ", "))
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// header is one extra request header a target needs.
type header struct{ Name, Value string }

// The Portkey AI gateway (npm @portkey-ai/gateway), run on node.
//
// Its package asks for @hono/node-server ^1.3.3, which npm resolves to the
// newest 1.x. From 1.14.2 on, @hono/node-server's Response hands back the
// upstream response's own (immutable) Headers, and Portkey's
// ResponseService.updateHeaders, which appends its x-portkey-* headers to
// every response, throws "TypeError: immutable": every stream answers 500
// {"status":"failure","message":"Something went wrong"}. Upstream:
// Portkey-AI/gateway issues 1389 and 1550. The bench pins @hono/node-server to the last release before that
// change with an npm override, so Portkey runs as its authors tested it.
const (
	portkeyVersion    = "1.15.2"
	portkeyNodeServer = "1.14.1" // @hono/node-server, pinned by override
)

// portkeyManifest is the package.json of Portkey's install directory.
func portkeyManifest() []byte {
	b, _ := json.MarshalIndent(map[string]any{
		"name":         "switchyard-bench-peer-portkey",
		"private":      true,
		"description":  "Installed by tools/bench (switchyard) to measure the Portkey gateway as a peer; safe to delete.",
		"dependencies": map[string]string{"@portkey-ai/gateway": portkeyVersion},
		"overrides":    map[string]string{"@hono/node-server": portkeyNodeServer},
	}, "", "  ")
	return append(b, '\n')
}

// peersCacheDir is where peers are installed:
// $XDG_CACHE_HOME/switchyard-bench/peers (~/.cache/... without it).
func peersCacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("peers: find the cache directory: %w", err)
	}
	return filepath.Join(base, "switchyard-bench", "peers"), nil
}

// portkeyEntry is the gateway's server script under an install directory.
func portkeyEntry(dir string) string {
	return filepath.Join(dir, "node_modules", "@portkey-ai", "gateway", "build", "start-server.js")
}

// installedVersion is the version of package pkg that node resolves from
// the gateway's package under dir (a copy nested under the gateway wins
// over the top-level one), or "" when there is none.
func installedVersion(dir, pkg string) string {
	gw := filepath.Join(dir, "node_modules", "@portkey-ai", "gateway")
	paths := []string{filepath.Join(gw, "package.json")}
	if pkg != "@portkey-ai/gateway" {
		paths = []string{
			filepath.Join(gw, "node_modules", pkg, "package.json"),
			filepath.Join(dir, "node_modules", pkg, "package.json"),
		}
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var m struct {
			Version string `json:"version"`
		}
		if json.Unmarshal(b, &m) == nil {
			return m.Version
		}
	}
	return ""
}

// portkeyInstalled reports whether dir holds the pinned install.
func portkeyInstalled(dir string) bool {
	if _, err := os.Stat(portkeyEntry(dir)); err != nil {
		return false
	}
	return installedVersion(dir, "@portkey-ai/gateway") == portkeyVersion &&
		installedVersion(dir, "@hono/node-server") == portkeyNodeServer
}

// ensurePortkey installs the pinned Portkey gateway under cache (unless
// it is there already) and returns the install directory. It installs
// into a temporary sibling and renames it into place, so an interrupted
// install is never taken for a whole one.
func ensurePortkey(ctx context.Context, o options, cache string) (string, error) {
	dir := filepath.Join(cache, "portkey-"+portkeyVersion)
	if portkeyInstalled(dir) {
		return dir, nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("peer portkey needs npm (and node) on PATH to install @portkey-ai/gateway@%s: %w", portkeyVersion, err)
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("peer portkey: %w", err)
	}
	tmp, err := os.MkdirTemp(cache, "portkey-"+portkeyVersion+".install-")
	if err != nil {
		return "", fmt.Errorf("peer portkey: %w", err)
	}
	defer os.RemoveAll(tmp) // after a successful rename there is nothing left
	if err := os.WriteFile(filepath.Join(tmp, "package.json"), portkeyManifest(), 0o644); err != nil {
		return "", fmt.Errorf("peer portkey: %w", err)
	}
	args := []string{"install", "--prefix", tmp, "--no-audit", "--no-fund", "--ignore-scripts"}
	progress(o, "installing peer portkey (@portkey-ai/gateway@%s, @hono/node-server@%s) into %s...\n", portkeyVersion, portkeyNodeServer, dir)
	ictx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ictx, npm, args...)
	cmd.WaitDelay = 5 * time.Second // a child of npm holding the output pipes must not block Wait
	cmd.Dir = tmp
	var out tail
	out.max = 4 << 10
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("peer portkey: %q failed: %w\n%s", "npm "+strings.Join(args, " "), err, out.String())
	}
	if !portkeyInstalled(tmp) {
		return "", fmt.Errorf("peer portkey: %q did not install @portkey-ai/gateway@%s with @hono/node-server@%s (found %q and %q)",
			"npm "+strings.Join(args, " "), portkeyVersion, portkeyNodeServer,
			installedVersion(tmp, "@portkey-ai/gateway"), installedVersion(tmp, "@hono/node-server"))
	}
	if portkeyInstalled(dir) { // another run installed it meanwhile (and may be running it)
		return dir, nil
	}
	if err := os.RemoveAll(dir); err != nil { // a stale or partial install
		return "", fmt.Errorf("peer portkey: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if portkeyInstalled(dir) { // another run installed it meanwhile
			return dir, nil
		}
		return "", fmt.Errorf("peer portkey: %w", err)
	}
	return dir, nil
}

// loopbackShim is preloaded into node (--require): Portkey's
// start-server.js listens on every interface (@hono/node-server's serve
// without a hostname) and has no flag for the address; an open Portkey
// forwards to any x-portkey-custom-host, so the bench binds it to
// loopback.
const loopbackShim = `// Written by tools/bench: binds the Portkey gateway to 127.0.0.1.
const net = require('net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' && args[1] === undefined) {
    args[1] = '127.0.0.1';
  }
  return listen.apply(this, args);
};
`

// portkeyArgs are node's arguments for the gateway under install on port.
func portkeyArgs(shim, install string, port int) []string {
	return []string{"--require", shim, portkeyEntry(install), "--port=" + strconv.Itoa(port), "--headless"}
}

// startPortkey installs Portkey if need be and starts it on a free
// loopback port (scratch files in dir).
func startPortkey(ctx context.Context, o options, dir string) (*child, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("peer portkey needs node on PATH: %w", err)
	}
	cache, err := peersCacheDir()
	if err != nil {
		return nil, err
	}
	install, err := ensurePortkey(ctx, o, cache)
	if err != nil {
		return nil, err
	}
	shim := filepath.Join(dir, "portkey-loopback.cjs")
	if err := os.WriteFile(shim, []byte(loopbackShim), 0o644); err != nil {
		return nil, fmt.Errorf("peer portkey: %w", err)
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, p, _ := strings.Cut(addr, ":")
	port, err := strconv.Atoi(p)
	if err != nil {
		return nil, fmt.Errorf("peer portkey: port of %s: %w", addr, err)
	}
	c, err := startChild(ctx, "portkey", addr, node, portkeyArgs(shim, install, port), nil)
	if err != nil {
		return nil, fmt.Errorf("peer portkey (node %s): %w", strings.Join(portkeyArgs(shim, install, port), " "), err)
	}
	return c, nil
}

// portkeyTarget is Portkey pointed at the upstream (its base URL, with
// /v1) as an OpenAI provider, with key as the upstream key: the
// x-portkey-provider and x-portkey-custom-host headers, the key in
// Authorization, and the upstream's own model name (Portkey passes it on).
func portkeyTarget(c *child, upstreamURL, key string) target {
	return target{
		Name: "portkey", Addr: c.addr, Auth: "Bearer " + key, Model: upModel, Proc: c,
		Headers: []header{{"x-portkey-provider", "openai"}, {"x-portkey-custom-host", upstreamURL}},
	}
}

// portkeyConfig is Portkey's gateway config (the x-portkey-config header):
// a fallback strategy over OpenAI-provider targets, one per key, in order,
// all on the upstream (custom_host, with /v1).
type portkeyConfig struct {
	Strategy struct {
		Mode string `json:"mode"`
	} `json:"strategy"`
	Targets []portkeyConfigTarget `json:"targets"`
}

type portkeyConfigTarget struct {
	Provider   string `json:"provider"`
	APIKey     string `json:"api_key"`
	CustomHost string `json:"custom_host"`
}

func portkeyFallbackConfig(upstreamURL string, keys ...string) string {
	var cfg portkeyConfig
	cfg.Strategy.Mode = "fallback"
	for _, k := range keys {
		cfg.Targets = append(cfg.Targets, portkeyConfigTarget{Provider: "openai", APIKey: k, CustomHost: upstreamURL})
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		panic(err) // strings only
	}
	return string(b)
}

// portkeyFallbackTarget is Portkey with a fallback config over keys (in
// order) on the upstream. No Authorization header: each config target
// carries its own key.
func portkeyFallbackTarget(c *child, upstreamURL string, keys ...string) target {
	return target{
		Name: "portkey", Addr: c.addr, Model: upModel, Proc: c,
		Headers: []header{{"x-portkey-config", portkeyFallbackConfig(upstreamURL, keys...)}},
	}
}

// startPeers starts every requested peer against the upstream. It returns
// the peers' processes (to stop) and their targets.
func startPeers(ctx context.Context, o options, dir, upstreamURL string) (map[string]*child, map[string]target, error) {
	procs, targets := map[string]*child{}, map[string]target{}
	for _, name := range o.Peers {
		p, ok := peers[name]
		if !ok {
			return nil, nil, errors.New("unknown peer " + name)
		}
		c, err := p.start(ctx, o, dir)
		if err != nil {
			for _, c := range procs {
				c.stop()
			}
			return nil, nil, err
		}
		procs[name] = c
		targets[name] = p.single(c, upstreamURL, upstreamKeys[0])
	}
	return procs, targets, nil
}

// peerProcs are the running peers' processes, in -peers order.
func peerProcs(o options, e *env) []*child {
	var out []*child
	for _, p := range o.Peers {
		if c := e.peers[p]; c != nil {
			out = append(out, c)
		}
	}
	return out
}
