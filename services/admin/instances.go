package admin

import (
	"context"
	"errors"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/routingdoc"
)

// What the fleet's instances did of a routing version: each reports it on
// NATS (routingdoc.Report); a configuration write collects the reports
// around its write (adminapi.ConfigWrite.Instances), GET /admin/config/instances
// asks again.

// outcomes turns the instances' reports into what each did of version.
func outcomes(reports []routingdoc.Report, version uint64) ([]adminapi.InstanceOutcome, *adminapi.OutcomeSummary) {
	out := make([]adminapi.InstanceOutcome, 0, len(reports))
	sum := &adminapi.OutcomeSummary{}
	for _, r := range reports {
		o := adminapi.InstanceOutcome{Instance: r.Instance, Service: r.Service, RoutingVersion: r.Version, Outcome: adminapi.OutcomePending}
		switch {
		case r.Version == version:
			o.Outcome = adminapi.OutcomeApplied
			sum.Applied++
		case r.Failure != nil && r.Failure.Version == version:
			o.Outcome, o.Error = adminapi.OutcomeRefused, r.Failure.Error
			sum.Refused++
		default:
			sum.Pending++
		}
		out = append(out, o)
	}
	return out, sum
}

// collect starts gathering the fleet's reports for a write (nil without
// NATS or when it cannot subscribe: the answer then lists no instances).
func (s *Service) collect() *routingdoc.Collector {
	if s.nc == nil {
		return nil
	}
	col, err := routingdoc.Collect(s.nc)
	if err != nil {
		s.log.Warn("admin: instance reports not collected", "err", err)
		return nil
	}
	return col
}

// getInstances: GET /admin/config/instances: every instance that answers
// within the settle interval, and what it did of the active version.
func (s *Service) getInstances(c *fiber.Ctx) error {
	if err := s.storeReady(c); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), opTimeout)
	defer cancel()
	active, err := s.routes.Active(ctx)
	if err != nil && !errors.Is(err, routingdoc.ErrNoActive) {
		return s.configError(c, err)
	}
	col := s.collect()
	if col == nil {
		return apiError(c, fiber.StatusServiceUnavailable, codeNATSUnavailable, "NATS is not reachable: no instance can be asked")
	}
	defer col.Close()
	list, sum := outcomes(col.Wait(ctx, active.Version, maxApplyWait), active.Version)
	return c.JSON(adminapi.InstanceList{ActiveVersion: active.Version, Instances: list, Summary: *sum})
}
