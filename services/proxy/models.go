package proxy

import (
	"encoding/json"
	"time"

	"github.com/gofiber/fiber/v2"
)

// listModels serves GET /v1/models: every name the gateway resolves, in the
// OpenAI list format, or Anthropic's when the caller sends
// anthropic-version.
func (s *Service) listModels(c *fiber.Ctx) error {
	if _, ok := s.clients.authenticate(c); !ok {
		return sendError(c, formatOf(c), fiber.StatusUnauthorized, codeInvalidAPIKey, "missing or invalid gateway API key")
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(s.modelsBody[formatOf(c)])
}

func (s *Service) buildModelLists() {
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
	for _, m := range s.table.Names {
		oa.Data = append(oa.Data, openAIModel{ID: m.ID, Object: "model", Created: created, OwnedBy: m.OwnedBy})
		if m.Kind == "chat" {
			an.Data = append(an.Data, anthropicModel{Type: "model", ID: m.ID, DisplayName: m.ID,
				CreatedAt: s.started.UTC().Format(time.RFC3339)})
		}
	}
	if n := len(an.Data); n > 0 {
		an.FirstID, an.LastID = &an.Data[0].ID, &an.Data[n-1].ID
	}
	s.modelsBody[0], _ = json.Marshal(oa)
	s.modelsBody[1], _ = json.Marshal(an)
}
