package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"switchyard.dev/services/proxy/internal/gwerror"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// stratFakes starts one fake OpenAI-format upstream per name.
func stratFakes(t testing.TB, names ...string) map[string]*fakeprovider.Server {
	t.Helper()
	out := map[string]*fakeprovider.Server{}
	for _, n := range names {
		s, err := fakeprovider.Start(fakeprovider.Options{Name: n})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		out[n] = s
	}
	return out
}

// stratConfig is a configuration with one provider per fake (the same
// name), each serving the models given for it, and one client key.
func stratConfig(fakes map[string]*fakeprovider.Server, models map[string][]config.Model) *config.Config {
	cfg := config.Defaults()
	cfg.Retry.BackoffBase, cfg.Retry.BackoffMax = time.Millisecond, 5*time.Millisecond
	for _, name := range []string{"pa", "pb", "pc"} {
		f, ok := fakes[name]
		if !ok {
			continue
		}
		cfg.Providers = append(cfg.Providers, config.Provider{
			Name: name, Type: "openai", BaseURL: f.URL() + "/v1", Selection: "round_robin",
			Keys:   []config.Key{{ID: name + "-k", Weight: 1, Value: config.NewSecret("key-" + name)}},
			Models: models[name],
		})
	}
	cfg.Clients = []config.ClientKey{{ID: "team", Models: []string{"*"}, Value: config.NewSecret(clientSecret)}}
	return cfg
}

// served posts a chat request and returns the provider that served it
// (X-Switchyard-Provider), failing the test on anything but 200.
func served(t testing.TB, url, body string, headers ...string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&e)
		t.Fatalf("status %d: %v", resp.StatusCode, e)
	}
	return resp.Header.Get(headerProvider)
}

func chatFor(model string) string {
	return `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`
}

const imageBody = `{"model":"%s","messages":[{"role":"user","content":[{"type":"text","text":"what is in it?"},{"type": "image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]}]}`

// TestLeastLatencyFollowsASlowdown: two providers serve a least_latency
// chain; when one slows down, traffic moves to the other within seconds,
// and a second proxy that sent nothing knows it too (the first one's
// passive reports carry the latencies over NATS).
func TestLeastLatencyFollowsASlowdown(t *testing.T) {
	fakes := stratFakes(t, "pa", "pb")
	ns := startNATS(t, t.TempDir(), "127.0.0.1:0")
	t.Cleanup(func() { natsembed.Stop(ns) })
	mk := func() *config.Config {
		cfg := stratConfig(fakes, map[string][]config.Model{"pa": {{Name: "m"}}, "pb": {{Name: "m"}}})
		cfg.Proxy.PassiveReportInterval = 50 * time.Millisecond
		explore := 0.05
		cfg.Routing.Explore = &explore
		cfg.Chains = map[string]config.Chain{"fast": {Strategy: config.StrategyLeastLatency,
			Steps: []config.ChainStep{{Target: "pa/m"}, {Target: "pb/m"}}}}
		return cfg
	}
	var svcs []*Service
	var urls []string
	for range 2 {
		nc, _ := testkit.ConnectNATS(t, ns.ClientURL())
		svc, url := startService(t, mk(), Deps{Log: testLogger(t), NATS: nc})
		<-svc.member.Bound()
		svcs, urls = append(svcs, svc), append(urls, url)
	}
	// Margins wide enough for a loaded CI machine, where the fast one's
	// answers can take tens of milliseconds now and then (15 ms failed once).
	fakes["pb"].AddRule(fakeprovider.Rule{FirstByteLatency: 60 * time.Millisecond})
	for range 20 { // both get measured; pa (fast) wins
		served(t, urls[0], chatFor("fast"))
	}
	count := func(n int) map[string]int {
		got := map[string]int{}
		for range n {
			got[served(t, urls[0], chatFor("fast"))]++
		}
		return got
	}
	if got := count(40); got["pa"] < 34 {
		t.Fatalf("pa is the fast one, yet served %v", got)
	}

	// pa slows down: within seconds most traffic is on pb.
	fakes["pb"].ClearRules()
	fakes["pa"].AddRule(fakeprovider.Rule{FirstByteLatency: 100 * time.Millisecond})
	start := time.Now()
	moved := false
	for time.Since(start) < 10*time.Second {
		if got := count(20); got["pb"] >= 17 {
			moved = true
			break
		}
	}
	if !moved {
		t.Fatal("traffic did not move away from the slow provider within 10 s")
	}
	t.Logf("traffic moved to pb %v after pa slowed down", time.Since(start).Round(time.Millisecond))

	// The second proxy sent nothing: it learns the latencies from the
	// first one's passive reports and would send to pb first.
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		x := explainOn(t, svcs[1], bus.ExplainRequest{V: 1, Model: "fast"})
		if len(x.Candidates) != 2 || x.Candidates[0].Provider != "pb" || x.Candidates[0].LatencyMS == nil || x.Candidates[1].LatencyMS == nil {
			return fmt.Errorf("proxy 2 explains %+v", x.Candidates)
		}
		return nil
	})
}

// explainOn asks one proxy for an explanation (as the NATS responder
// does).
func explainOn(t testing.TB, s *Service, q bus.ExplainRequest) route.Explanation {
	t.Helper()
	data, _ := json.Marshal(q)
	rep := s.explain(data)
	if rep.Error != nil {
		t.Fatalf("explain: %+v", rep.Error)
	}
	var x route.Explanation
	if err := json.Unmarshal(rep.Explanation, &x); err != nil {
		t.Fatal(err)
	}
	return x
}

// TestCapabilityRouting: an image request goes only to the vision model,
// a text request takes the declared order, and a request no target can
// serve is refused with the reasons (400, in the API's format), having
// called nothing.
func TestCapabilityRouting(t *testing.T) {
	fakes := stratFakes(t, "pa", "pb")
	cfg := stratConfig(fakes, map[string][]config.Model{
		"pa": {{Name: "text", Capabilities: []string{"tools"}, ContextWindow: 1000}},
		"pb": {{Name: "eyes", Capabilities: []string{"vision", "tools"}}},
	})
	cfg.Chains = map[string]config.Chain{
		"any":       {Steps: []config.ChainStep{{Target: "pa/text"}, {Target: "pb/eyes"}}},
		"text-only": {Steps: []config.ChainStep{{Target: "pa/text"}}},
	}
	_, url := startService(t, cfg, Deps{Log: testLogger(t)})

	for i := range 10 {
		if p := served(t, url, fmt.Sprintf(imageBody, "any")); p != "pb" {
			t.Fatalf("image request %d served by %s", i, p)
		}
		if p := served(t, url, chatFor("any")); p != "pa" {
			t.Fatalf("text request %d served by %s", i, p)
		}
	}
	if n := fakes["pa"].CountCalls(func(c fakeprovider.Call) bool { return strings.Contains(string(c.Body), "image_url") }); n != 0 {
		t.Fatalf("the text model got %d image requests", n)
	}
	// A prompt beyond the text model's context window goes to pb.
	long := `{"model":"any","messages":[{"role":"user","content":"` + strings.Repeat("word ", 1000) + `"}]}`
	if p := served(t, url, long); p != "pb" {
		t.Fatalf("a prompt over pa's context window was served by %s", p)
	}

	before := len(fakes["pa"].Calls())
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(fmt.Sprintf(imageBody, "text-only")))
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Error struct{ Message, Code, Type string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 400 || e.Error.Code != gwerror.NoMatchingTarget || !strings.Contains(e.Error.Message, "pa/text (lacks_capability: needs vision)") {
		t.Fatalf("image request to a text-only chain: %d %+v", resp.StatusCode, e.Error)
	}
	if len(fakes["pa"].Calls()) != before {
		t.Fatal("a refused request reached the upstream")
	}
}

// TestFailClosed: with fail_closed a target of unknown health (no health
// record: no prober ran) or without declared capabilities is rejected,
// and the 503 says why.
func TestFailClosed(t *testing.T) {
	fakes := stratFakes(t, "pa")
	cfg := stratConfig(fakes, map[string][]config.Model{"pa": {{Name: "m"}}})
	cfg.Routing.FailClosed = true
	_, url := startService(t, cfg, Deps{Log: testLogger(t)})
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(chatFor("m")))
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Error struct{ Message, Code string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 503 || e.Error.Code != gwerror.NoTarget || !strings.Contains(e.Error.Message, "pa/m (health_unknown)") {
		t.Fatalf("fail_closed without health: %d %+v", resp.StatusCode, e.Error)
	}
	if n := len(fakes["pa"].Calls()); n != 0 {
		t.Fatalf("%d upstream calls", n)
	}
}

// TestRegionRouting: a request's region header prefers providers there; a
// required region with no provider there is refused; a client's region
// setting applies when the request names none.
func TestRegionRouting(t *testing.T) {
	fakes := stratFakes(t, "pa", "pb")
	cfg := stratConfig(fakes, map[string][]config.Model{"pa": {{Name: "m"}}, "pb": {{Name: "m"}}})
	cfg.Providers[0].Region, cfg.Providers[1].Region = "us", "eu"
	cfg.Clients = append(cfg.Clients, config.ClientKey{ID: "eu-team", Models: []string{"*"}, Region: "eu",
		RegionRequired: true, Value: config.NewSecret("sk-eu-team")})
	_, url := startService(t, cfg, Deps{Log: testLogger(t)})
	for range 5 {
		if p := served(t, url, chatFor("m")); p != "pa" { // plain name: declared order
			t.Fatalf("no region: served by %s", p)
		}
		if p := served(t, url, chatFor("m"), "X-Switchyard-Region", "eu"); p != "pb" {
			t.Fatalf("region eu: served by %s", p)
		}
	}
	// A key whose region is required: its caller's headers cannot move
	// its requests elsewhere.
	eu := []string{"Authorization", "Bearer sk-eu-team"}
	if p := served(t, url, chatFor("m"), eu...); p != "pb" {
		t.Fatalf("eu-team: served by %s", p)
	}
	if p := served(t, url, chatFor("m"), append(eu, "X-Switchyard-Region", "us")...); p != "pb" {
		t.Fatalf("eu-team asking for us: served by %s", p)
	}
	// Preferred, not required: pb failing, pa serves.
	id := fakes["pb"].AddRule(fakeprovider.Rule{Error: "openai.invalid_api_key"})
	if p := served(t, url, chatFor("m"), "X-Switchyard-Region", "eu"); p != "pa" {
		t.Fatalf("eu preferred, pb refusing: served by %s", p)
	}
	fakes["pb"].RemoveRule(id)

	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(chatFor("m")))
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	req.Header.Set("X-Switchyard-Region", "ap")
	req.Header.Set("X-Switchyard-Region-Required", "true")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Error struct{ Message, Code string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 400 || e.Error.Code != gwerror.NoMatchingTarget || !strings.Contains(e.Error.Message, `wrong_region: in "us", required "ap"`) {
		t.Fatalf("required region ap: %d %+v", resp.StatusCode, e.Error)
	}

	// pb's key is held now (the refusal above): the eu-team key's
	// requests, whose region is required, never go to pa, whatever region
	// their caller's headers name.
	before := len(fakes["pa"].Calls())
	req, _ = http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(chatFor("m")))
	req.Header.Set("Authorization", "Bearer sk-eu-team")
	req.Header.Set("X-Switchyard-Region", "us")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == 200 || len(fakes["pa"].Calls()) != before {
		t.Fatalf("eu-team with pb refusing, asking for us: %d, %d calls to the us provider", resp.StatusCode, len(fakes["pa"].Calls())-before)
	}
}

// TestWeightedSticky: a weighted chain hashing a session header sends each
// session to one target every time, and sessions split by the weights.
func TestWeightedSticky(t *testing.T) {
	fakes := stratFakes(t, "pa", "pb")
	cfg := stratConfig(fakes, map[string][]config.Model{"pa": {{Name: "m"}}, "pb": {{Name: "m"}}})
	cfg.Chains = map[string]config.Chain{"split": {Strategy: config.StrategyWeighted, HashOn: "header:X-Session-Id",
		Steps: []config.ChainStep{{Target: "pa/m", Weight: 3}, {Target: "pb/m", Weight: 1}}}}
	_, url := startService(t, cfg, Deps{Log: testLogger(t)})
	shares := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for s := w; s < 200; s += 4 {
				session := fmt.Sprintf("conv-%d", s)
				first := served(t, url, chatFor("split"), "X-Session-Id", session)
				for range 2 {
					if p := served(t, url, chatFor("split"), "X-Session-Id", session); p != first {
						t.Errorf("session %s moved from %s to %s", session, first, p)
					}
				}
				mu.Lock()
				shares[first]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if shares["pa"] < 125 || shares["pa"] > 175 {
		t.Fatalf("200 sessions at 3:1 split %v", shares)
	}
	t.Logf("200 sessions at 3:1: %v", shares)
}

// TestProviderBudget: a provider with a day budget takes budget_aware
// traffic (it is the cheapest) until the fleet's spend there reaches its
// budget; then the next provider serves, without an error.
func TestProviderBudget(t *testing.T) {
	fakes := stratFakes(t, "pa", "pb")
	ns := startNATS(t, t.TempDir(), "127.0.0.1:0")
	t.Cleanup(func() { natsembed.Stop(ns) })
	cfg := stratConfig(fakes, map[string][]config.Model{"pa": {{Name: "m"}}, "pb": {{Name: "m"}}})
	price := func(provider string, in, out float64) config.Price {
		return config.Price{Provider: provider, Model: "m", Input: &in, Output: &out}
	}
	cfg.Prices = []config.Price{price("pa", 1, 2), price("pb", 10, 20)}
	cfg.Providers[0].Budget = config.Budget{Day: 0.0005}
	cfg.Metering.LimitsInterval = 20 * time.Millisecond
	cfg.Chains = map[string]config.Chain{"thrifty": {Strategy: config.StrategyBudgetAware,
		Steps: []config.ChainStep{{Target: "pb/m"}, {Target: "pa/m"}}}}
	nc, _ := testkit.ConnectNATS(t, ns.ClientURL())
	svc, url := startService(t, cfg, Deps{Log: testLogger(t), NATS: nc})
	<-svc.member.Bound()
	x := explainOn(t, svc, bus.ExplainRequest{V: 1, Model: "thrifty", Body: json.RawMessage(chatFor("thrifty"))})
	if x.Candidates[0].Provider != "pa" || x.Candidates[0].EstimatedCostUSD == nil {
		t.Fatalf("budget_aware would not start with the cheap provider: %+v", x.Candidates)
	}
	onPA := 0
	for i := 0; ; i++ {
		if i == 500 {
			t.Fatal("pa's budget was never reached")
		}
		if served(t, url, chatFor("thrifty")) != "pa" {
			break
		}
		onPA++
	}
	left, limited := svc.rt.Load().budgets.remaining("pa")
	if onPA == 0 || !limited || left > 0.0001 {
		t.Fatalf("%d requests on pa; %g left", onPA, left)
	}
	x = explainOn(t, svc, bus.ExplainRequest{V: 1, Model: "thrifty", Body: json.RawMessage(chatFor("thrifty"))})
	if len(x.Rejected) != 1 || x.Rejected[0].Provider != "pa" || x.Rejected[0].Reason != "over_budget" {
		t.Fatalf("after the budget: rejected %+v", x.Rejected)
	}
	t.Logf("pa served %d requests before its $0.0005 day budget ran out", onPA)
}

// TestExplainOverNATS: the proxies answer route explanations on
// switchyard.route.explain in their queue group, from memory: a held key is
// shown held with its hold id, an image request's rejected steps carry
// their reasons, bad requests get errors, nothing is sent upstream and no
// probe is taken. The nats CLI's request gets the same answer.
func TestExplainOverNATS(t *testing.T) {
	ff := newFleet(t, 2, func(c *config.Config) {
		c.Providers[0].Models[0].Capabilities = []string{"tools"}
		c.Providers[1].Region = "eu"
	})
	ctx := context.Background()
	sc := hold.Scope{Kind: hold.ScopeKey, Provider: "fake-openai", Key: "a1"}
	if err := ff.proxies[0].engine.Pin(ctx, sc, time.Now().Add(time.Hour), "test"); err != nil {
		t.Fatal(err)
	}
	nc, _ := testkit.ConnectNATS(t, ff.ns.ClientURL())
	ask := func(q bus.ExplainRequest) bus.ExplainReply {
		t.Helper()
		data, _ := json.Marshal(q)
		m, err := nc.Request(bus.ExplainSubject, data, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep bus.ExplainReply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		for range 4 { // whichever proxy answers knows the hold
			rep := ask(bus.ExplainRequest{V: 1, Model: "demo-chat", Client: "team"})
			var x route.Explanation
			if rep.Error != nil || json.Unmarshal(rep.Explanation, &x) != nil {
				return fmt.Errorf("reply %+v", rep)
			}
			if len(x.Candidates) != 2 || x.Candidates[0].Target != "fake-openai/demo-model" || len(x.Candidates[0].Keys) != 2 {
				return fmt.Errorf("candidates %+v", x.Candidates)
			}
			k := x.Candidates[0].Keys[0]
			if k.ID != "a1" || k.State != route.KeyHeld || k.HoldID != sc.ID() || x.Candidates[0].Keys[1].State != route.KeyAvailable {
				return fmt.Errorf("keys %+v", x.Candidates[0].Keys)
			}
		}
		return nil
	})

	rep := ask(bus.ExplainRequest{V: 1, Model: "demo-chat", Body: json.RawMessage(fmt.Sprintf(imageBody, "demo-chat")),
		Headers: map[string]string{"x-switchyard-region": "eu"}})
	var x route.Explanation
	if err := json.Unmarshal(rep.Explanation, &x); err != nil || rep.Error != nil {
		t.Fatalf("image explanation %+v", rep)
	}
	if len(x.Candidates) != 1 || x.Candidates[0].Provider != "fake-anthropic" || x.Region != "eu" ||
		len(x.Rejected) != 1 || x.Rejected[0].Reason != "lacks_capability" || x.Rejected[0].Detail != "lacks vision" ||
		len(x.Needs) != 1 || x.Needs[0] != "vision" {
		t.Fatalf("image explanation %s", rep.Explanation)
	}

	for _, tt := range []struct {
		q      bus.ExplainRequest
		status int
		code   string
	}{
		{bus.ExplainRequest{V: 1, Model: "nope"}, 404, gwerror.ModelNotFound},
		{bus.ExplainRequest{V: 1}, 400, "invalid_request"},
		{bus.ExplainRequest{V: 2, Model: "demo-chat"}, 400, "invalid_request"},
		{bus.ExplainRequest{V: 1, Model: "demo-chat", Client: "ghost"}, 404, "client_not_found"},
		{bus.ExplainRequest{V: 1, Model: "demo-chat", Body: json.RawMessage(`[1]`)}, 400, "invalid_request"},
		{bus.ExplainRequest{V: 1, Model: "demo-chat", Endpoint: "images"}, 400, "invalid_request"},
	} {
		if rep := ask(tt.q); rep.Error == nil || rep.Error.Status != tt.status || rep.Error.Code != tt.code {
			t.Errorf("%+v: %+v", tt.q, rep.Error)
		}
	}
	if n := len(ff.openai.Calls()) + len(ff.anthropic.Calls()); n != 0 {
		t.Fatalf("explanations sent %d upstream calls", n)
	}

	cli := testkit.NatsCLI(t)
	out, err := testkit.NatsCLICommand(ctx, t, cli, ff.ns.ClientURL(), "request", bus.ExplainSubject, `{"v":1,"model":"demo-chat"}`, "--raw").Output()
	if err != nil {
		t.Fatalf("nats request: %v", err)
	}
	if err := json.Unmarshal(out, &rep); err != nil || rep.Error != nil || !strings.Contains(string(rep.Explanation), `"strategy":"priority"`) {
		t.Fatalf("nats request answered %s", out)
	}
}

// TestInlineImagesAreNotPromptText: an inline base64 image counts as one
// image's tokens, not a token per four bytes (internal/tokens): a 450 KB
// photo to a 128k-context vision model is served; a prompt of that much
// text is still refused.
func TestInlineImagesAreNotPromptText(t *testing.T) {
	img := strings.Repeat("A", 600<<10)
	openai := `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,` + img + `"}}]}]}`
	text := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("word ", 120<<10) + `"}]}`

	f := newFixture(t, func(c *config.Config) {
		c.Providers[0].Models[0].ContextWindow = 128000
		c.Providers[0].Models[0].Capabilities = []string{"vision"}
	})
	body := strings.Replace(openai, `"model":"m"`, `"model":"fake-openai/demo-model"`, 1)
	if status, _, b := f.call(t, "/v1/chat/completions", body); status != 200 {
		t.Fatalf("one image: %d %.300s", status, b)
	}
	body = strings.Replace(text, `"model":"m"`, `"model":"fake-openai/demo-model"`, 1)
	if status, _, b := f.call(t, "/v1/chat/completions", body); status != 400 || errorCode(t, b) != gwerror.NoMatchingTarget {
		t.Fatalf("600 KB of text: %d %.300s", status, b)
	}
}
