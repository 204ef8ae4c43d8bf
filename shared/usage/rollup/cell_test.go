package rollup

import (
	"encoding/json"
	"testing"

	"switchyard.dev/shared/usage"
)

// TestCellBeforeAttempts: a cell stored before the attempt counters decodes
// with 0 attempts, and the counters survive a round trip.
func TestCellBeforeAttempts(t *testing.T) {
	old := `{"client":"app","plan":"","client_type":"","provider":"openai","model":"gpt-4o","key_id":"k1",
		"endpoint":"/v1/chat/completions","status":200,"class":"","through":7,"requests":3,"errors":0,
		"tokens":{"input":1,"output":2,"cached_input":0,"cache_write":0,"reasoning":0},"cost_usd":0.5,"cost_unknown":0,
		"tokens_estimated":0,"streams":0,"streams_incomplete":0,"cancelled":0}`
	var c Cell
	if err := json.Unmarshal([]byte(old), &c); err != nil {
		t.Fatal(err)
	}
	if c.Requests != 3 || c.Through != 7 || c.Attempts != 0 || c.FailedAttempts != 0 {
		t.Fatalf("old cell: %+v", c)
	}
	c.AddFailed(&usage.FailedAttempt{Class: "transient"})
	c.AddFailed(&usage.FailedAttempt{Class: "transient", Cancelled: true})
	c.Add(&usage.Record{Attempts: 2, FailedAttempts: []usage.FailedAttempt{{}}})
	b, err := json.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	var back Cell
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Requests != 4 || back.Attempts != 3 || back.FailedAttempts != 1 {
		t.Errorf("after two failed attempts (one cancelled) and a request answered on its second attempt: %d requests, %d attempts, %d failed",
			back.Requests, back.Attempts, back.FailedAttempts)
	}
}

func TestDimsOfFailed(t *testing.T) {
	r := &usage.Record{ClientID: "app", Provider: "anthropic", Model: "claude", KeyID: "b1", Endpoint: "/v1/messages", Status: 200}
	d := DimsOfFailed(r, &usage.FailedAttempt{Provider: "openai", Model: "gpt-4o", KeyID: "k1", Class: "rate_limit"})
	want := Dims{Client: "app", Provider: "openai", Model: "gpt-4o", KeyID: "k1", Endpoint: "/v1/messages", Status: 200, Class: "rate_limit"}
	if d != want {
		t.Errorf("dims %+v, want %+v", d, want)
	}
}
