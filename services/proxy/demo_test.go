package proxy

import (
	"fmt"
	"testing"

	"switchyard.dev/shared/config"
	"switchyard.dev/tools/fakeprovider"
)

// TestDemoHoldStep runs the root README's "Make a fake key fail" step on
// configs/demo.yaml: after any number of earlier requests (the README's
// first examples), revoking key a1 makes the next request try a1, fail
// over to a2 and hold a1, so the hold the next step shows exists for sure
// (it took luck with keys in rotation). demo-chat caches its answers:
// each step asks something new, as the README's do.
func TestDemoHoldStep(t *testing.T) {
	env := []string{
		"DEMO_FAKE_OPENAI_KEY_1=demo-openai-key-1", "DEMO_FAKE_OPENAI_KEY_2=demo-openai-key-2",
		"DEMO_FAKE_ANTHROPIC_KEY_1=demo-anthropic-key-1", "DEMO_FAKE_ANTHROPIC_KEY_2=demo-anthropic-key-2",
		"DEMO_ADMIN_TOKEN=demo-admin-token",
		"DEMO_CREDENTIALS_KEY=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
	}
	for earlier := range 4 {
		t.Run(fmt.Sprintf("%d earlier requests", earlier), func(t *testing.T) {
			cfg, err := config.Load("../../configs/demo.yaml", env)
			if err != nil {
				t.Fatal(err)
			}
			oa, an := startFakes(t)
			cfg.Provider("fake-openai").BaseURL = oa.URL() + "/v1"
			cfg.Provider("fake-anthropic").BaseURL = an.URL()
			f := &fixture{openai: oa, anthropic: an, cfg: cfg}
			f.svc, f.url = startService(t, cfg, Deps{Log: testLogger(t)})
			const body = `{"model":"demo-chat","messages":[{"role":"user","content":"hi"}]}`
			for i := range earlier {
				if st, _, b := f.call(t, "/v1/chat/completions", fmt.Sprintf(`{"model":"demo-chat","messages":[{"role":"user","content":"hello %d"}]}`, i)); st != 200 {
					t.Fatalf("an earlier request: %d %s", st, b)
				}
			}
			oa.AddRule(fakeprovider.Rule{Key: "demo-openai-key-1", Error: "openai.invalid_api_key"})
			st, h, b := f.call(t, "/v1/chat/completions", body)
			if st != 200 || h.Get("X-Switchyard-Key-Id") != "a2" || h.Get("X-Switchyard-Attempts") != "2" {
				t.Fatalf("the request after a1 was revoked: %d key %s attempts %s %s, want a1 tried, then a2",
					st, h.Get("X-Switchyard-Key-Id"), h.Get("X-Switchyard-Attempts"), b)
			}
			next := `{"model":"demo-chat","messages":[{"role":"user","content":"are you there?"}]}`
			if _, h, _ := f.call(t, "/v1/chat/completions", next); h.Get("X-Switchyard-Key-Id") != "a2" || h.Get("X-Switchyard-Attempts") != "1" {
				t.Errorf("the next request: key %s attempts %s, want a2 at once (a1 held)", h.Get("X-Switchyard-Key-Id"), h.Get("X-Switchyard-Attempts"))
			}
			if n := callsWith(oa, "demo-openai-key-1"); n != earlier+1 {
				t.Errorf("a1 was called %d times, want %d (every earlier request, then the one refused)", n, earlier+1)
			}
		})
	}
}
