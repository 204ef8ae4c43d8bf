package adminapi

import (
	"encoding/json"
	"time"
)

// The response cache (/admin/cache).

// CacheEntry is an entry of the switchyard_cache bucket as the API shows
// it: what it answers and what served it; Answer only when one entry is
// asked for (GET /admin/cache/entries/{key}).
type CacheEntry struct {
	Key      string    `json:"key"`
	Route    string    `json:"route"`
	Scope    string    `json:"scope"` // the client key's id, or "_shared"
	Endpoint string    `json:"endpoint"`
	Provider string    `json:"provider"`
	Model    string    `json:"model"`
	StoredAt time.Time `json:"stored_at"`
	Expires  time.Time `json:"expires"`
	AgeS     int64     `json:"age_s"`
	// Bytes is the size of the answer.
	Bytes   int             `json:"bytes"`
	CostUSD *float64        `json:"cost_usd"`
	Answer  json.RawMessage `json:"answer,omitempty"`
	// Events is an entry kept as the stream it was relayed as.
	Events string `json:"events,omitempty"`
}

// CacheList is GET /admin/cache: the keys that matched the filters
// (Matched), the entries of the first limit of them in key order, newest
// first (Truncated: more matched than were read).
type CacheList struct {
	Entries   []CacheEntry `json:"entries"`
	Matched   int          `json:"matched"`
	Truncated bool         `json:"truncated"`
}

// CachePurge is DELETE /admin/cache: how many entries were purged.
type CachePurge struct {
	Purged int `json:"purged"`
}
