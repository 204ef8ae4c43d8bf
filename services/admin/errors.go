package admin

import (
	"errors"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// apiError answers {"error":{"code","message"}} with status. Codes are a
// closed list, documented in README.md and openapi.json.
func apiError(c *fiber.Ctx, status int, code, message string) error {
	return c.Status(status).JSON(fiber.Map{"error": fiber.Map{"code": code, "message": message}})
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

// errorHandler answers errors fiber raises (unknown routes, oversized
// bodies) in the same JSON form.
func errorHandler(c *fiber.Ctx, err error) error {
	status := fiber.StatusInternalServerError
	var fe *fiber.Error
	if errors.As(err, &fe) {
		status = fe.Code
	}
	code := strings.ToLower(strings.ReplaceAll(http.StatusText(status), " ", "_"))
	if status == fiber.StatusInternalServerError {
		code = codeInternal
	}
	return apiError(c, status, code, err.Error())
}
