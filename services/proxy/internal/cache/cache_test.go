package cache

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestKeyNormalises: bodies that ask the same question share a key (key
// order, white space, number forms, stream and model left out, escapes);
// any difference in what is asked, the route, the scope or the endpoint
// does not.
func TestKeyNormalises(t *testing.T) {
	base := `{"model":"a","messages":[{"role":"user","content":"hi é"}],"temperature":1,"max_tokens":100}`
	key := func(route, scope, ep, body string, user bool) string {
		t.Helper()
		k, err := Key(route, scope, ep, []byte(body), user)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return k
	}
	k0 := key("chain:demo", "team", "/v1/chat/completions", base, false)
	if !strings.HasPrefix(k0, "chain=3Ademo.team.") || len(k0) != len("chain=3Ademo.team.")+64 {
		t.Fatalf("key %q", k0)
	}
	for _, same := range []string{
		`{ "max_tokens" : 100 , "temperature" : 1.0 , "messages" : [ { "content" : "hi \u00e9" , "role" : "user" } ] , "model" : "b" }`,
		`{"model":"a","messages":[{"role":"user","content":"hi é"}],"temperature":1e0,"max_tokens":1.00e2,"stream":false,"stream_options":{"include_usage":true}}`,
		`{"model":"a","messages":[{"role":"user","content":"hi é"}],"temperature":1,"max_tokens":100,"user":"someone"}`,
	} {
		if k := key("chain:demo", "team", "/v1/chat/completions", same, false); k != k0 {
			t.Errorf("%s: another key", same)
		}
	}
	for _, c := range []struct{ route, scope, ep, body string }{
		{"chain:demo", "team", "/v1/chat/completions", strings.Replace(base, "hi é", "hi e", 1)},
		{"chain:demo", "team", "/v1/chat/completions", strings.Replace(base, `"temperature":1`, `"temperature":1.5`, 1)},
		{"chain:demo", "team", "/v1/chat/completions", strings.Replace(base, `}],`, `},{"role":"user","content":"x"}],`, 1)},
		{"chain:other", "team", "/v1/chat/completions", base},
		{"chain:demo", "other", "/v1/chat/completions", base},
		{"chain:demo", "team", "/v1/completions", base},
	} {
		if k := key(c.route, c.scope, c.ep, c.body, false); k == k0 {
			t.Errorf("%+v: the same key", c)
		}
	}
	withUser := `{"model":"a","messages":[{"role":"user","content":"hi é"}],"temperature":1,"max_tokens":100,"user":"someone"}`
	if key("chain:demo", "team", "/v1/chat/completions", withUser, true) == key("chain:demo", "team", "/v1/chat/completions", base, true) {
		t.Error("the user field left out of a policy that keys by it")
	}
	for _, bad := range []string{`[1]`, `{"a":1} {"b":2}`, `{"a":`, `{"n":1e999}`} {
		if _, err := Key("r", "s", "/e", []byte(bad), false); err == nil {
			t.Errorf("%s: a key", bad)
		}
	}
}

// TestMemoryBound: the memory keeps at most its bytes, dropping the least
// recently used, and forgets expired entries.
func TestMemoryBound(t *testing.T) {
	m := NewMemory(30)
	now := time.Now()
	e := func(n int, ttl time.Duration) *Entry {
		return &Entry{V: 1, Expires: now.Add(ttl), Answer: []byte(strings.Repeat("x", n))}
	}
	m.Put("a", e(10, time.Hour))
	m.Put("b", e(10, time.Hour))
	m.Get("a", now) // a used more recently than b
	m.Put("c", e(15, time.Hour))
	if _, ok := m.Get("b", now); ok {
		t.Error("the least recently used entry was kept beyond the bound")
	}
	if _, ok := m.Get("a", now); !ok || m.Bytes() != 25 {
		t.Errorf("a kept %v, %d bytes", ok, m.Bytes())
	}
	m.Put("big", e(31, time.Hour))
	if _, ok := m.Get("big", now); ok {
		t.Error("an entry larger than the memory was kept")
	}
	m.Put("short", e(1, time.Millisecond))
	if _, ok := m.Get("short", now.Add(time.Second)); ok {
		t.Error("an expired entry was served")
	}
}

// TestFlights: one leader per key; followers get its entry, or nothing
// when it had none or their wait ended first.
func TestFlights(t *testing.T) {
	s := NewStore(1<<20, 1<<20, time.Millisecond, nil)
	f, lead := s.Join("k")
	g, lead2 := s.Join("k")
	if !lead || lead2 || f != g {
		t.Fatal("two leaders of one key")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if e := g.Wait(ctx, nil); e != nil {
		t.Error("a follower whose wait ended got an entry")
	}
	want := &Entry{V: 1}
	s.Land("k", f, want)
	if e := g.Wait(context.Background(), nil); e != want {
		t.Errorf("the follower got %v", e)
	}
	if _, lead := s.Join("k"); !lead {
		t.Error("a landed flight still leads")
	}
	if _, res := s.Lookup(context.Background(), "nothing"); res != Bypass {
		t.Errorf("an unbound store's lookup: %v", res)
	}
}

// TestNearest: the nearest entry of the same prefix and endpoint above
// the threshold is found; other prefixes, endpoints, lengths and entries
// gone from memory are not.
func TestNearest(t *testing.T) {
	s := NewStore(1<<20, 1<<20, time.Millisecond, nil)
	put := func(key, ep string, vec ...float32) {
		s.Put(key, &Entry{V: 1, Endpoint: ep, Expires: time.Now().Add(time.Hour), Answer: []byte(`{}`), Embedding: Normalize(vec)}, time.Hour)
	}
	put("r.a.1", "/chat", 1, 0, 0)
	put("r.a.2", "/chat", 0.8, 0.6, 0)
	put("r.b.3", "/chat", 1, 0.01, 0)
	put("r.a.4", "/messages", 1, 0.01, 0)
	if e, sim, ok := s.Nearest("r.a.", "/chat", []float32{0.9, 0.1, 0}, 0.9); !ok || e.Embedding[0] != 1 || sim < 0.99 {
		t.Errorf("nearest: %v %v %v", e, sim, ok)
	}
	if _, sim, ok := s.Nearest("r.a.", "/chat", []float32{0, 0, 1}, 0.5); ok {
		t.Errorf("a far question found one (%v)", sim)
	}
	if _, _, ok := s.Nearest("r.a.", "/chat", []float32{1, 0}, 0.1); ok {
		t.Error("a vector of another length matched")
	}
	s.Memory().Remove("r.a.1")
	if e, _, ok := s.Nearest("r.a.", "/chat", []float32{1, 0, 0}, 0.9); ok {
		t.Errorf("an entry gone from memory was served: %v", e)
	}
}
