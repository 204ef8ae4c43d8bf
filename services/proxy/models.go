package proxy

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"time"

	"switchyard.dev/services/proxy/internal/clientkey"
	"switchyard.dev/services/proxy/internal/gwerror"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/provider"
)

// listModels serves GET /v1/models: every name the gateway resolves, in the
// OpenAI list format, or Anthropic's when the caller sends
// anthropic-version. Models served only by providers the prober reports
// offline are left out, unless every provider is offline (then the whole
// inventory is listed rather than turn an outage into "model not found"),
// and so are the models the caller's key may not use (clients[].models,
// its plan's models).
func (s *Service) listModels(c *fiber.Ctx) error {
	rt := s.rt.Load()
	key, ok := rt.clients.Load().Authenticate(&c.Request().Header)
	if !ok {
		return sendError(c, s.formatOf(c), gwerror.InvalidAPIKey, "missing or invalid gateway API key")
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	names := rt.allowedNames(key, rt.table.VisibleNames())
	if len(names) == len(rt.table.Names) {
		return c.Send(rt.modelsBody[s.formatOf(c)])
	}
	bodies := s.modelLists(names)
	return c.Send(bodies[s.formatOf(c)])
}

// getModel serves GET /v1/models/{id}: the entry /v1/models lists for the
// name id, in the same format (OpenAI's model object, Anthropic's when the
// caller sends anthropic-version), or 404 model_not_found in that format
// for a name the list does not have. id is the rest of the path, so that a
// provider/model name is found whether its slash is escaped (%2F, as the
// SDKs send it) or not.
func (s *Service) getModel(c *fiber.Ctx) error {
	rt := s.rt.Load()
	f := s.formatOf(c)
	key, ok := rt.clients.Load().Authenticate(&c.Request().Header)
	if !ok {
		return sendError(c, f, gwerror.InvalidAPIKey, "missing or invalid gateway API key")
	}
	id := c.Params("*") // as sent: fiber does not unescape the path
	if u, err := url.PathUnescape(id); err == nil {
		id = u
	}
	names := rt.allowedNames(key, rt.table.VisibleNames())
	i := slices.IndexFunc(names, func(m route.ModelName) bool { return m.ID == id })
	if i >= 0 && (f != provider.FormatAnthropic || names[i].Kind == "chat") {
		m := names[i]
		m.ID = id
		var b []byte
		if f == provider.FormatAnthropic {
			b, _ = json.Marshal(s.anthropicModel(m))
		} else {
			b, _ = json.Marshal(s.openAIModel(m))
		}
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Send(b)
	}
	return sendError(c, f, gwerror.ModelNotFound, fmt.Sprintf("the model `%s` does not exist on this gateway", id))
}

// allowedNames are the names of names the caller's key may use (all of
// them for an anonymous caller, or a key allowed every model), as a
// request would be allowed (a chain by both its names when either is).
func (rt *routing) allowedNames(key *clientkey.Key, names []route.ModelName) []route.ModelName {
	if key == nil || key.AllowsAll() {
		return names
	}
	return slices.DeleteFunc(slices.Clone(names), func(m route.ModelName) bool {
		rte, ok := rt.table.Resolve(m.ID)
		return !ok || !key.Allows(m.ID, rte.Steps)
	})
}

// modelCounted is the requested model as usage records it: a chain's bare
// name as its chain:<name> (route.Route.CountedAs).
func (r *request) modelCounted() string {
	if r.sel.route == nil {
		return r.model
	}
	return r.sel.route.CountedAs(r.model)
}

// openAIModel and anthropicModel are a model's entry in the OpenAI and
// Anthropic formats (Anthropic's lists chat models alone).
type (
	openAIModel struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	anthropicModel struct {
		Type        string `json:"type"`
		ID          string `json:"id"`
		DisplayName string `json:"display_name"`
		CreatedAt   string `json:"created_at"`
	}
)

func (s *Service) openAIModel(m route.ModelName) openAIModel {
	return openAIModel{ID: m.ID, Object: "model", Created: s.started.Unix(), OwnedBy: m.OwnedBy}
}

func (s *Service) anthropicModel(m route.ModelName) anthropicModel {
	return anthropicModel{Type: "model", ID: m.ID, DisplayName: m.ID, CreatedAt: s.started.UTC().Format(time.RFC3339)}
}

// modelLists renders names in the OpenAI and Anthropic list formats (by
// provider.Format).
func (s *Service) modelLists(names []route.ModelName) [2][]byte {
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
		oa.Data = append(oa.Data, s.openAIModel(m))
		if m.Kind == "chat" {
			an.Data = append(an.Data, s.anthropicModel(m))
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
