package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"switchyard.dev/shared/headroom"
)

type fakeBook []headroom.Entry

func (f fakeBook) Entries() []headroom.Entry { return f }

func TestHeadroomCollector(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	later, earlier := now.Add(time.Minute).UnixNano(), now.Add(-time.Second).UnixNano()
	book := fakeBook{
		{Provider: "openai", Key: "k1", Model: "gpt-4o", Windows: []headroom.Snapshot{
			{Kind: headroom.Requests, Limit: 20, Remaining: 10, InFlight: 2, Reset: later},
			{Kind: headroom.Tokens, Limit: 1000, Remaining: 900, Reset: later},
		}},
		{Provider: "openai", Key: "k1", Model: "gpt-4o-mini", Windows: []headroom.Snapshot{
			{Kind: headroom.Requests, Limit: 20, Remaining: 15, Reset: later},
		}},
		{Provider: "openai", Key: "k2", Model: "gpt-4o", Windows: []headroom.Snapshot{
			{Kind: headroom.Requests, Limit: 20, Remaining: 0, InFlight: 1, Reset: later}, // over-charged: 0, not negative
			{Kind: headroom.Tokens, Remaining: 5, Reset: later},                           // no limit: no share
		}},
		{Provider: "anthropic", Key: "a", Windows: []headroom.Snapshot{
			{Kind: headroom.OutputTokens, Limit: 8000, Remaining: 0, Reset: earlier}, // reset passed: whole
		}},
	}
	c := NewHeadroomCollector(book)
	c.now = func() time.Time { return now }
	want := `# HELP switchyard_key_headroom_ratio Share of a key's rate-limit window left as its provider last stated it, less this process's requests in flight (per model where the provider scopes limits by model: the tightest model's).
# TYPE switchyard_key_headroom_ratio gauge
switchyard_key_headroom_ratio{key="a",kind="output_tokens",provider="anthropic"} 1
switchyard_key_headroom_ratio{key="k1",kind="requests",provider="openai"} 0.4
switchyard_key_headroom_ratio{key="k1",kind="tokens",provider="openai"} 0.9
switchyard_key_headroom_ratio{key="k2",kind="requests",provider="openai"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), HeadroomName); err != nil {
		t.Fatal(err)
	}
}
