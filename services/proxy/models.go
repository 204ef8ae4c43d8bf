package proxy

import (
	"encoding/json"
	"time"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/proxy/route"
)

// listModels serves GET /v1/models: every name the gateway resolves, in the
// OpenAI list format, or Anthropic's when the caller sends
// anthropic-version. Models served only by providers the prober reports
// offline are left out, unless every provider is offline (then the whole
// inventory is listed rather than turn an outage into "model not found").
func (s *Service) listModels(c *fiber.Ctx) error {
	rt := s.rt.Load()
	if _, ok := rt.clients.Load().authenticate(c); !ok {
		return sendError(c, formatOf(c), fiber.StatusUnauthorized, codeInvalidAPIKey, "missing or invalid gateway API key")
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	names := rt.table.VisibleNames()
	if len(names) == len(rt.table.Names) {
		return c.Send(rt.modelsBody[formatOf(c)])
	}
	bodies := s.modelLists(names)
	return c.Send(bodies[formatOf(c)])
}

// modelLists renders names in the OpenAI and Anthropic list formats (by
// provider.Format).
func (s *Service) modelLists(names []route.ModelName) [2][]byte {
	created := s.started.Unix()
	type openAIModel struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	type anthropicModel struct {
		Type        string `json:"type"`
		ID          string `json:"id"`
		DisplayName string `json:"display_name"`
		CreatedAt   string `json:"created_at"`
	}
	oa := struct {
		Object string        `json:"object"`
		Data   []openAIModel `json:"data"`
	}{Object: "list", Data: []openAIModel{}}
	an := struct {
		Data    []anthropicModel `json:"data"`
		HasMore bool             `json:"has_more"`
		FirstID *string          `json:"first_id"`
		LastID  *string          `json:"last_id"`
	}{Data: []anthropicModel{}}
	for _, m := range names {
		oa.Data = append(oa.Data, openAIModel{ID: m.ID, Object: "model", Created: created, OwnedBy: m.OwnedBy})
		if m.Kind == "chat" {
			an.Data = append(an.Data, anthropicModel{Type: "model", ID: m.ID, DisplayName: m.ID,
				CreatedAt: s.started.UTC().Format(time.RFC3339)})
		}
	}
	if n := len(an.Data); n > 0 {
		an.FirstID, an.LastID = &an.Data[0].ID, &an.Data[n-1].ID
	}
	var out [2][]byte
	out[0], _ = json.Marshal(oa)
	out[1], _ = json.Marshal(an)
	return out
}
