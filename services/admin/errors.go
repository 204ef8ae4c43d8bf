package admin

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/servicehttp"
)

// apiError answers {"error":{"code","message"}} with status. Codes are a
// closed list, documented in README.md and openapi.json.
func apiError(c *fiber.Ctx, status int, code, message string) error {
	return c.Status(status).JSON(adminapi.ErrorAnswer{Error: adminapi.ErrorDetail{Code: code, Message: message}})
}

// Error codes.
const (
	codeUnauthorized    = "unauthorized"
	codeForbidden       = "forbidden"
	codeNotFound        = "not_found"
	codeBadRequest      = "bad_request"
	codeNATSUnavailable = "nats_unavailable"
	codeNoBreaker       = "no_breaker"
	codeRotationOff     = "rotation_disabled"
	codeInternal        = "internal"
	codeBusy            = "busy"
	codeNoBudget        = "no_budget"
	// the routing configuration's writes
	codeInvalidConfig    = "invalid_config"
	codeConflict         = "conflict"
	codeUnsupportedMedia = "unsupported_media_type"
)

func natsDown(c *fiber.Ctx) error {
	return apiError(c, fiber.StatusServiceUnavailable, codeNATSUnavailable, "NATS is unavailable: try again when the admin service is ready (/readyz)")
}

// refusedByJetStream reports whether err is JetStream refusing a request
// as malformed (an API error with code 400: a consumer whose filter
// subjects overlap, a bad start policy), and returns the server's
// description. Such a request, built from query parameters, fails the same
// way on every retry: it is the caller's 400, not 503 nats_unavailable,
// whose message tells the operator to wait. Any other error (no answer,
// no stream, a 503 from JetStream) is NATS not being available.
func refusedByJetStream(err error) (string, bool) {
	var ae *jetstream.APIError
	if errors.As(err, &ae) && ae.Code == http.StatusBadRequest {
		return fmt.Sprintf("%s (JetStream error %d)", ae.Description, ae.ErrorCode), true
	}
	return "", false
}

// jetStreamFailed answers a failed JetStream read of what (a query, a
// filter): 400 with the server's description when JetStream refused it
// (refusedByJetStream), else down's answer (NATS or the stream is not
// there), logged.
func (s *Service) jetStreamFailed(c *fiber.Ctx, err error, what string, down func(*fiber.Ctx) error) error {
	if desc, ok := refusedByJetStream(err); ok {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, "JetStream refused the "+what+": "+desc)
	}
	s.log.Warn("admin: "+what, "err", err)
	return down(c)
}

// errorHandler answers errors fiber raises (unknown routes, oversized
// bodies) in the same JSON form.
func errorHandler(c *fiber.Ctx, err error) error {
	status := servicehttp.ErrorStatus(err)
	code := strings.ToLower(strings.ReplaceAll(http.StatusText(status), " ", "_"))
	if status == fiber.StatusInternalServerError {
		code = codeInternal
	}
	return apiError(c, status, code, err.Error())
}
