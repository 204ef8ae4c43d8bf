package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"

	"switchyard.dev/services/proxy/internal/gwerror"

	"switchyard.dev/shared/config"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
)

// TestGetModel: GET /v1/models/{id} answers the entry /v1/models lists for
// the name, in the caller's format, names with a slash included (escaped
// as the SDKs send them, or not), and 404 model_not_found in that format
// for a name the list does not have.
func TestGetModel(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	get := func(path string, headers ...string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, f.url+path, nil)
		req.Header.Set("Authorization", "Bearer "+clientSecret)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b json.RawMessage
		_ = jsonDecode(resp, &b)
		return resp.StatusCode, b
	}
	// The list's entries, by id, in both formats.
	listed := func(headers ...string) map[string]string {
		_, b := get("/v1/models", headers...)
		var list struct{ Data []json.RawMessage }
		if err := json.Unmarshal(b, &list); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, e := range list.Data {
			var m struct{ ID string }
			_ = json.Unmarshal(e, &m)
			out[m.ID] = string(e)
		}
		return out
	}
	oaList, anList := listed(), listed("anthropic-version", "2023-06-01")

	oa, an := openAIClient(f), anthropicClient(f)
	for _, id := range []string{"demo-claude", "fake-openai/demo-model", "chain:demo-chat", "demo-embed"} {
		m, err := oa.Models.Get(ctx, id)
		if err != nil {
			t.Fatalf("OpenAI SDK %s: %v", id, err)
		}
		if m.ID != id || m.RawJSON() != oaList[id] {
			t.Errorf("OpenAI SDK %s: %s, listed %s", id, m.RawJSON(), oaList[id])
		}
		am, err := an.Models.Get(ctx, id, anthropic.ModelGetParams{})
		if id == "demo-embed" { // not a chat model: Anthropic's list has no such name
			var ae *anthropic.Error
			if !errorsAs(err, &ae) || ae.StatusCode != 404 || errorCode(t, []byte(ae.RawJSON())) != gwerror.ModelNotFound || ae.Type() != "not_found_error" {
				t.Errorf("Anthropic SDK %s: %v", id, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Anthropic SDK %s: %v", id, err)
		}
		if am.ID != id || am.RawJSON() != anList[id] {
			t.Errorf("Anthropic SDK %s: %s, listed %s", id, am.RawJSON(), anList[id])
		}
	}
	// A chain by its bare name, as requests may name it (listed beside
	// chain:demo-chat): its entry, under that name.
	if m, err := oa.Models.Get(ctx, "demo-chat"); err != nil || m.ID != "demo-chat" || m.OwnedBy != "switchyard" {
		t.Errorf("OpenAI SDK, a chain's bare name: %+v %v", m, err)
	}
	// The slash as it is.
	if status, b := get("/v1/models/fake-openai/demo-model"); status != 200 || string(b) != oaList["fake-openai/demo-model"] {
		t.Errorf("unescaped slash: %d %s", status, b)
	}

	_, err := oa.Models.Get(ctx, "nope")
	var oe *openai.Error
	if !errorsAs(err, &oe) || oe.StatusCode != 404 || oe.Code != gwerror.ModelNotFound {
		t.Errorf("OpenAI SDK unknown model: %v", err)
	}
	_, err = an.Models.Get(ctx, "nope", anthropic.ModelGetParams{})
	var ae *anthropic.Error
	if !errorsAs(err, &ae) || ae.StatusCode != 404 || ae.Type() != "not_found_error" {
		t.Errorf("Anthropic SDK unknown model: %v", err)
	}

	req, _ := http.NewRequest(http.MethodGet, f.url+"/v1/models/demo-claude", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("without a key: %d", resp.StatusCode)
	}
}

// TestModelsListedForTheCallersKey: /v1/models (and /v1/models/{id})
// lists only what the caller's key may use: its clients[].models, a
// provider's models by "<provider>/*", a chain by its bare name too.
func TestModelsListedForTheCallersKey(t *testing.T) {
	const narrowSecret = "sk-client-narrow-456"
	f := newFixture(t, func(c *config.Config) {
		c.Clients = append(c.Clients, config.ClientKey{ID: "narrow", Models: []string{"demo-chat", "fake-anthropic/*"}, Value: config.NewSecret(narrowSecret)})
	})
	get := func(secret, path string) (int, []string) { return listedIDs(t, f.url, secret, path) }
	_, all := get(clientSecret, "/v1/models")
	if !slices.Contains(all, "demo-embed") || !slices.Contains(all, "fake-openai/demo-model") {
		t.Fatalf("the key allowed every model: %v", all)
	}
	_, narrow := get(narrowSecret, "/v1/models")
	want := []string{"chain:demo-chat", "demo-chat", "demo-claude", "fake-anthropic/demo-claude"}
	if !slices.Equal(narrow, want) {
		t.Errorf("listed for the narrow key: %v, want %v", narrow, want)
	}
	for path, status := range map[string]int{"/v1/models/demo-embed": 404, "/v1/models/demo-claude": 200, "/v1/models/demo-chat": 200} {
		if st, _ := get(narrowSecret, path); st != status {
			t.Errorf("%s for the narrow key: %d, want %d", path, st, status)
		}
	}
}

// TestChainOneModelTwoNames: a chain's bare name and its chain:<name> are
// one model: a key (or a plan) allowed either may call and list both,
// /v1/models lists both, and usage and metrics count both as chain:<name>.
func TestChainOneModelTwoNames(t *testing.T) {
	const (
		prefixedSecret = "sk-client-prefixed-1"
		bareSecret     = "sk-client-bare-2"
		planSecret     = "sk-client-plan-3"
	)
	mf := newMeterFixture(t, func(c *config.Config) {
		c.Plans["chains"] = config.Plan{Models: []string{"chain:demo-chat"}}
		c.Clients = append(c.Clients,
			config.ClientKey{ID: "prefixed", Models: []string{"chain:demo-chat"}, Value: config.NewSecret(prefixedSecret)},
			config.ClientKey{ID: "bare", Models: []string{"demo-chat"}, Value: config.NewSecret(bareSecret)},
			config.ClientKey{ID: "plan", Plan: "chains", Models: []string{"*"}, Value: config.NewSecret(planSecret)})
	})
	chat := func(secret, model string) (int, []byte) {
		t.Helper()
		st, _, b := mf.call(t, "/v1/chat/completions", chatBodyFor(model), "Authorization", "Bearer "+secret)
		return st, b
	}
	if _, ids := listedIDs(t, mf.url, clientSecret, "/v1/models"); !slices.Contains(ids, "demo-chat") || !slices.Contains(ids, "chain:demo-chat") {
		t.Errorf("listed for every model: %v, want both names of the chain", ids)
	}
	calls := 0
	for _, secret := range []string{prefixedSecret, bareSecret, planSecret} {
		_, got := listedIDs(t, mf.url, secret, "/v1/models")
		if want := []string{"chain:demo-chat", "demo-chat"}; !slices.Equal(got, want) {
			t.Errorf("listed for %s: %v, want %v", secret, got, want)
		}
		for _, model := range []string{"demo-chat", "chain:demo-chat"} {
			st, b := chat(secret, model)
			if st != 200 {
				t.Errorf("%s calls %s: %d %s", secret, model, st, b)
			}
			calls++
		}
		if st, _ := chat(secret, "demo-claude"); st != 403 {
			t.Errorf("%s calls demo-claude: %d, want 403", secret, st)
		}
		calls++ // a refusal has its usage record too
	}
	for _, rec := range mf.records(t, calls) {
		if rec.Status == 403 {
			if rec.ModelRequested != "demo-claude" {
				t.Errorf("usage record of %s's refusal: model_requested %q", rec.ClientID, rec.ModelRequested)
			}
			continue
		}
		if rec.ModelRequested != "chain:demo-chat" {
			t.Errorf("usage record of %s: model_requested %q, want chain:demo-chat", rec.ClientID, rec.ModelRequested)
		}
	}
	if text := mf.scrape(t); strings.Contains(text, `model="demo-chat"`) {
		t.Errorf("a metric series for the bare name:\n%s", grep(text, `model="demo-chat"`))
	}
}

func chatBodyFor(model string) string {
	return `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`
}

// listedIDs GETs a /v1/models path with a client key: its status and the
// ids listed, sorted.
func listedIDs(t *testing.T, base, secret, path string) (int, []string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Data []struct{ ID string } }
	_ = jsonDecode(resp, &list)
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	sort.Strings(ids)
	return resp.StatusCode, ids
}
