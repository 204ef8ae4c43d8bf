package admin

import (
	"bytes"
	"encoding/json"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/shared/failure"
)

// classify: POST /admin/classify: the classifier as a service, with the
// input and output of `swctl classify` (package failure's wire forms). The
// body is one object (answered with one result) or an array of objects
// (answered with an array, an {"error":...} item for each input that could
// not be read). "provider" may name a configured provider (its type and
// trip_on rules apply) or a provider type (the global rules apply).
func (s *Service) classify(c *fiber.Ctx) error {
	body := bytes.TrimSpace(c.Request().Body())
	if len(body) == 0 {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, "empty body: want a failure object (see swctl classify)")
	}
	if body[0] == '[' {
		var items []json.RawMessage
		if err := json.Unmarshal(body, &items); err != nil {
			return apiError(c, fiber.StatusBadRequest, codeBadRequest, "body: "+err.Error())
		}
		out := make([]any, len(items))
		for i, it := range items {
			r, err := s.classifyOne(it)
			if err != nil {
				out[i] = failure.LineError(i+1, err)
				continue
			}
			out[i] = r
		}
		return c.JSON(out)
	}
	r, err := s.classifyOne(body)
	if err != nil {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, err.Error())
	}
	return c.JSON(r)
}

func (s *Service) classifyOne(raw []byte) (failure.WireResult, error) {
	in, err := failure.DecodeWire(raw)
	if err != nil {
		return failure.WireResult{}, err
	}
	cfg := s.routing().cfg
	name := in.Provider
	if p := cfg.Provider(name); p != nil {
		in.Provider = p.Type
	}
	return cfg.Classifier().Classify(in, name).WireFor(in, cfg.Retry.Policy()), nil
}
