package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/bus"
)

// DefaultExplainTimeout bounds the wait for a proxy's route explanation.
const DefaultExplainTimeout = 2 * time.Second

// Error codes of POST /admin/route/explain besides the common ones; the
// proxy's own codes (invalid_request, model_not_found, client_not_found,
// model_not_allowed) are relayed as it sent them.
const (
	// codeNoProxy: no proxy answered the explanation request.
	codeNoProxy = "no_proxy"
	// codeBadGateway: a proxy answered something unreadable.
	codeBadGateway = "bad_gateway"
	// codeTooLarge: the request does not fit in a NATS message.
	codeTooLarge = "request_entity_too_large"
)

// explainRoute: POST /admin/route/explain (role read): asks one proxy of
// the fleet (bus.ExplainSubject, answered in the proxies' queue group) how
// it would route a request now, and answers its explanation, or its error
// with its status. Nothing is sent upstream; the request's body is neither
// logged nor stored.
func (s *Service) explainRoute(c *fiber.Ctx) error {
	var in adminapi.RouteExplainRequest
	if err := decodeBody(c.Request().Body(), &in); err != nil {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, err.Error())
	}
	if b := bytes.TrimSpace(in.Body); len(b) == 0 || bytes.Equal(b, []byte("null")) {
		in.Body = nil
	} else if b[0] != '{' {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, "body must be a JSON object (the request body the routing depends on)")
	}
	if in.Model == "" && in.Body != nil {
		var m struct {
			Model any `json:"model"`
		}
		if json.Unmarshal(in.Body, &m) == nil {
			in.Model, _ = m.Model.(string)
		}
	}
	if in.Model == "" {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, "model must be set (or body.model)")
	}
	if s.nc == nil || !s.nc.IsConnected() {
		return natsDown(c)
	}
	data, err := json.Marshal(bus.ExplainRequest{V: bus.ExplainVersion, Model: in.Model, Endpoint: in.Endpoint,
		Client: in.Client, Body: in.Body, Headers: in.Headers})
	if err != nil {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, err.Error())
	}
	msg, err := s.nc.Request(bus.ExplainSubject, data, s.explainTimeout)
	switch {
	case err == nil:
	case errors.Is(err, nats.ErrNoResponders):
		return apiError(c, fiber.StatusServiceUnavailable, codeNoProxy,
			"no proxy answered: none listens on "+bus.ExplainSubject+" (no responders; is a proxy running on this NATS?)")
	case errors.Is(err, nats.ErrTimeout):
		return apiError(c, fiber.StatusServiceUnavailable, codeNoProxy,
			fmt.Sprintf("no proxy answered on %s within %s (timeout)", bus.ExplainSubject, s.explainTimeout))
	case errors.Is(err, nats.ErrMaxPayload):
		return apiError(c, fiber.StatusRequestEntityTooLarge, codeTooLarge,
			fmt.Sprintf("the request (%d bytes) exceeds the NATS maximum payload", len(data)))
	default:
		s.log.Warn("admin: route explanation", "err", err)
		return natsDown(c)
	}
	var r bus.ExplainReply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return apiError(c, fiber.StatusBadGateway, codeBadGateway, "unreadable proxy answer: "+err.Error())
	}
	if r.V != bus.ExplainVersion {
		return apiError(c, fiber.StatusBadGateway, codeBadGateway,
			fmt.Sprintf("proxy %s answered version %d, want %d", r.Instance, r.V, bus.ExplainVersion))
	}
	if e := r.Error; e != nil {
		status := e.Status
		if status < 400 || status > 599 {
			status = fiber.StatusBadGateway
		}
		code := e.Code
		if code == "" {
			code = codeBadGateway
		}
		return c.Status(status).JSON(fiber.Map{"error": fiber.Map{"code": code, "message": e.Message}, "instance": r.Instance})
	}
	if len(bytes.TrimSpace(r.Explanation)) == 0 {
		return apiError(c, fiber.StatusBadGateway, codeBadGateway, "proxy "+r.Instance+" answered neither an explanation nor an error")
	}
	return c.JSON(adminapi.RouteExplanation{Instance: r.Instance, RoutingVersion: r.RoutingVersion, Explanation: r.Explanation})
}
