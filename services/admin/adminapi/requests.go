package adminapi

import (
	"time"

	"switchyard.dev/shared/debug"
)

// RequestList is GET /admin/requests: the summaries of the debug bundles
// that match, newest first.
type RequestList struct {
	Requests []debug.Summary `json:"requests"`
	// Since and Limit are the list's bounds (the defaults filled in).
	Since time.Time `json:"since"`
	Limit int       `json:"limit"`
}
