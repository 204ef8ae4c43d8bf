package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

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
			if !errorsAs(err, &ae) || ae.StatusCode != 404 || errorCode(t, []byte(ae.RawJSON())) != codeModelNotFound || ae.Type() != "not_found_error" {
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
	// A chain by its bare name, as requests may name it (listed as
	// chain:demo-chat): its entry, under the name asked for.
	if m, err := oa.Models.Get(ctx, "demo-chat"); err != nil || m.ID != "demo-chat" || m.OwnedBy != "switchyard" {
		t.Errorf("OpenAI SDK, a chain's bare name: %+v %v", m, err)
	}
	// The slash as it is.
	if status, b := get("/v1/models/fake-openai/demo-model"); status != 200 || string(b) != oaList["fake-openai/demo-model"] {
		t.Errorf("unescaped slash: %d %s", status, b)
	}

	_, err := oa.Models.Get(ctx, "nope")
	var oe *openai.Error
	if !errorsAs(err, &oe) || oe.StatusCode != 404 || oe.Code != codeModelNotFound {
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
