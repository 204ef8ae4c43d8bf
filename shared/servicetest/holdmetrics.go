package servicetest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/holdkv"
	"switchyard.dev/shared/testkit"
)

// breakerLine is the form of every switchyard_circuit_breaker_state series
// on every service: labels model and provider (promhttp sorts them), a
// provider name without '/', a value 0, 1 or 2.
var breakerLine = regexp.MustCompile(`^switchyard_circuit_breaker_state\{model="[^"]*",provider="[-_A-Za-z0-9]+"\} [012]$`)

// BreakerMetrics checks a service's hold metrics against the fleet's
// bucket: it writes two breaker trips into switchyard_holds through nc
// (provider provider, and provider+model provider/model, both open for ten
// minutes), waits until the service's /metrics at metricsURL shows
//
//	switchyard_circuit_breaker_state{model="",provider="<provider>"} 2
//	switchyard_circuit_breaker_state{model="<model>",provider="<provider>"} 2
//	switchyard_holds{class="transient",scope="provider",state="held"} 1
//	switchyard_holds{class="transient",scope="provider+model",state="held"} 1
//
// with every breaker series in that one label set, then deletes the two
// records. The proxy's, the prober's and the admin service's tests run it,
// so the three expose the same series for the same state.
func BreakerMetrics(t *testing.T, nc *nats.Conn, metricsURL, provider, model string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, bus.BucketHolds)
	if err != nil {
		t.Fatalf("bind %s: %v", bus.BucketHolds, err)
	}
	store := holdkv.NewStore(js, kv, nil)
	now := time.Now()
	var ids []string
	for _, sc := range []hold.Scope{
		{Kind: hold.ScopeProvider, Provider: provider},
		{Kind: hold.ScopeProviderModel, Provider: provider, Model: model},
	} {
		rec := hold.Record{
			ID: sc.ID(), Scope: sc, State: hold.StateHeld, Class: failure.Transient,
			Since: now, Until: now.Add(10 * time.Minute), Reason: "circuit breaker open (servicetest)",
			Source: hold.SourceBreaker, RecordedBy: "servicetest", RecordedAt: now,
		}
		if _, err := store.Create(ctx, rec, 0); err != nil {
			t.Fatalf("write %s: %v", rec.ID, err)
		}
		ids = append(ids, rec.ID)
	}
	defer func() {
		for _, id := range ids {
			if err := kv.Delete(context.Background(), id); err != nil {
				t.Errorf("delete %s: %v", id, err)
			}
		}
	}()
	want := []string{
		fmt.Sprintf(`switchyard_circuit_breaker_state{model="",provider=%q} 2`, provider),
		fmt.Sprintf(`switchyard_circuit_breaker_state{model=%q,provider=%q} 2`, model, provider),
		`switchyard_holds{class="transient",scope="provider",state="held"} 1`,
		`switchyard_holds{class="transient",scope="provider+model",state="held"} 1`,
	}
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		text, err := Scrape(metricsURL)
		if err != nil {
			return err
		}
		lines := strings.Split(text, "\n")
		for _, w := range want {
			found := false
			for _, l := range lines {
				found = found || l == w
			}
			if !found {
				return fmt.Errorf("no %s in\n%s", w, grep(lines, "switchyard_holds", "switchyard_circuit_breaker_state"))
			}
		}
		for _, l := range lines {
			if strings.HasPrefix(l, "switchyard_circuit_breaker_state") && !breakerLine.MatchString(l) {
				return fmt.Errorf("breaker series %q is not in the label set {provider, model}", l)
			}
		}
		return nil
	})
}

// Scrape returns the text a GET of url answers (a /metrics page), or an
// error when it fails or answers other than 200.
func Scrape(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b), nil
}

func grep(lines []string, prefixes ...string) string {
	var out []string
	for _, l := range lines {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
