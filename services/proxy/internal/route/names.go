package route

import (
	"strings"

	"switchyard.dev/shared/config"
)

// ChainTwin returns the other spelling of a chain's name, "chain:<name>"
// for "<name>" and back, when both resolve to that chain (the bare name
// does when no model or alias has it); "" for any other name.
func (t *Table) ChainTwin(name string) string {
	twin, ok := strings.CutPrefix(name, config.ChainPrefix)
	if !ok {
		twin = config.ChainPrefix + name
	}
	a, b := t.byName[name], t.byName[twin]
	if a == nil || a != b || a.Kind != "chain" {
		return ""
	}
	return twin
}

// CountedAs is the name usage and metrics record a request for requested
// under: a chain's bare name as its "chain:<name>", any other as asked.
func (rt *Route) CountedAs(requested string) string {
	if rt.Kind == "chain" && rt.Name == config.ChainPrefix+requested {
		return rt.Name
	}
	return requested
}
