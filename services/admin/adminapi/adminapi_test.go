package adminapi

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/planlimit"
	"switchyard.dev/shared/routingdoc"
	"switchyard.dev/shared/usage"
)

// roundTrip encodes v, decodes the JSON into a new value of its type and
// returns the JSON and that value.
func roundTrip[T any](t *testing.T, v T) (string, T) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return string(b), out
}

// TestConfigRoundTrip: every field of the configuration answers survives
// the wire, sha256 among them (swctl's hand copy had lost it).
func TestConfigRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	doc := "providers: []\n"
	v := ConfigVersion{Version: 3, By: "op", At: at, Comment: "c", Source: "edit", FromVersion: 2, Replaces: 2,
		Edit: "chains.default.steps[1].active: true -> false", SHA256: routingdoc.Sum([]byte(doc)),
		Active: true, ActiveRevision: 9, Document: doc}
	js, got := roundTrip(t, ActiveConfig{ConfigVersion: v, AppliedVersion: 3, RoutingError: &routingdoc.Failure{Version: 4, Error: "bad"}})
	if !strings.Contains(js, `"sha256":"`+v.SHA256+`"`) {
		t.Fatalf("no sha256 in %s", js)
	}
	if got.SHA256 != v.SHA256 || !reflect.DeepEqual(got.ConfigVersion, v) || got.AppliedVersion != 3 || got.RoutingError.Version != 4 {
		t.Fatalf("round trip: %+v, want %+v", got, v)
	}
	w := ConfigWrite{Changed: true, Version: v, Applied: true,
		Instances: []InstanceOutcome{{Instance: "p1", Service: "proxy", Outcome: OutcomeRefused, RoutingVersion: 2, Error: "no"}},
		Summary:   &OutcomeSummary{Refused: 1}}
	if _, gotW := roundTrip(t, w); !reflect.DeepEqual(gotW, w) {
		t.Fatalf("write round trip: %+v, want %+v", gotW, w)
	}
	d := ConfigDiff{From: 1, To: 3, Changes: routingdoc.Changes{Changes: []routingdoc.Change{{Op: "changed", Path: "a.b", Before: 1.0, After: 2.0}}, Changed: 1}}
	if js, gotD := roundTrip(t, d); !reflect.DeepEqual(gotD, d) || !strings.Contains(js, `"changes":[`) {
		t.Fatalf("diff round trip: %s %+v, want %+v", js, gotD, d)
	}
}

// TestErrorAnswer: the error body's form, errors only for
// invalid_config.
func TestErrorAnswer(t *testing.T) {
	js, _ := roundTrip(t, ErrorAnswer{Error: ErrorDetail{Code: "not_found", Message: "no hold x"}})
	if want := `{"error":{"code":"not_found","message":"no hold x"}}`; js != want {
		t.Fatalf("error answer %s, want %s", js, want)
	}
	e := ErrorAnswer{Error: ErrorDetail{Code: "invalid_config", Message: "m", Errors: []string{"a", "b"}}}
	if _, got := roundTrip(t, e); !reflect.DeepEqual(got, e) {
		t.Fatalf("round trip %+v, want %+v", got, e)
	}
}

// TestHoldRoundTrip: a hold as the API shows it decodes into the same
// record (class, scope and state included) with its live flag.
func TestHoldRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	h := Hold{Record: hold.Record{Version: hold.SchemaVersion, ID: "openai.k1", Scope: hold.Scope{Kind: hold.ScopeKey, Provider: "openai", Key: "k1"},
		State: hold.StateHeld, Class: failure.RateLimit, Rung: 2, Since: at, Until: at.Add(time.Minute), Reason: "429", Source: hold.SourceProxy},
		Live: true, RemainingMS: 60000}
	js, got := roundTrip(t, HoldList{Holds: []Hold{h}, NATS: true})
	if !strings.Contains(js, `"class":"rate_limit"`) || !strings.Contains(js, `"remaining_ms":60000`) {
		t.Fatalf("hold list %s", js)
	}
	if !got.NATS || len(got.Holds) != 1 || !reflect.DeepEqual(got.Holds[0], h) {
		t.Fatalf("round trip %+v, want %+v", got, h)
	}
}

// TestClientRoundTrip: a client key's limits and consumption survive the
// wire.
func TestClientRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	c := Client{ID: "team-a", Plan: "pro", Limits: Limits{RequestsPerMinute: 100, ConcurrentRequests: 5, Budget: Budget{Day: 1}},
		Usage: ClientUsage{RequestsPerMinute: 2.5, InFlight: 1, Day: planlimit.Period{ID: "d20261202", SpendUSD: 0.5, BudgetUSD: 1, Ends: at},
			Reset: &BudgetReset{By: "op", At: at}}}
	if _, got := roundTrip(t, ClientList{Clients: []Client{c}, NATS: true, Role: "read"}); len(got.Clients) != 1 || !reflect.DeepEqual(got.Clients[0], c) || !got.NATS {
		t.Fatalf("round trip %+v, want %+v", got, c)
	}
	if !c.Limits.HasBudget() || (Limits{}).HasBudget() {
		t.Fatal("HasBudget")
	}
}

// TestUsageReportRoundTrip: a usage report's sums survive the wire (the
// unread messages and the requests without a known cost among them,
// which swctl warns about).
func TestUsageReportRoundTrip(t *testing.T) {
	cost := 0.25
	at := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	g := UsageGroup{Bucket: &at, Key: map[string]string{"client": "a"}, Requests: 3, Errors: 1, ErrorRate: 1.0 / 3,
		Tokens:  UsageTokens{Tokens: usage.Tokens{Input: 10, Output: 5}, Total: 15},
		CostUSD: &cost, CostUnknownRequests: 1, LatencyMS: Percentiles{P50: 12, P95: 30, P99: 40}}
	r := UsageReport{From: at, To: at.Add(time.Hour), GroupBy: []string{"client"}, Interval: "hour", UnreadMessages: 2,
		Truncated: true, TruncatedBy: "lost", Totals: g, Groups: []UsageGroup{g}}
	js, got := roundTrip(t, r)
	if !reflect.DeepEqual(got, r) {
		t.Fatalf("round trip %+v, want %+v", got, r)
	}
	if !strings.Contains(js, `"unread_messages":2`) || !strings.Contains(js, `"cost_unknown_requests":1`) {
		t.Fatalf("report %s", js)
	}
}
