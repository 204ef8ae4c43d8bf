package fakeprovider

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// callJSON is a Call as the control endpoint lists it (body as a string).
type callJSON struct {
	At             time.Time   `json:"at"`
	Method         string      `json:"method"`
	Path           string      `json:"path"`
	Query          string      `json:"query,omitempty"`
	Header         http.Header `json:"header"`
	Key            string      `json:"key"`
	Model          string      `json:"model"`
	Stream         bool        `json:"stream"`
	Body           string      `json:"body"`
	FileSize       int64       `json:"file_size,omitempty"`
	IdempotencyKey string      `json:"idempotency_key,omitempty"`
	Rule           string      `json:"rule,omitempty"`
	Status         int         `json:"status,omitempty"`
	RateLimited    bool        `json:"rate_limited,omitempty"`
}

// controlRoutes serves the control endpoint under /_fake/.
func (s *Server) controlRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_fake/rules", func(w http.ResponseWriter, r *http.Request) {
		writeControl(w, http.StatusOK, s.Rules())
	})
	mux.HandleFunc("POST /_fake/rules", func(w http.ResponseWriter, r *http.Request) {
		var rule Rule
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&rule); err != nil {
			writeControl(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		if err := rule.Validate(); err != nil {
			writeControl(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("rule.%v", err)})
			return
		}
		writeControl(w, http.StatusOK, map[string]string{"id": s.AddRule(rule)})
	})
	mux.HandleFunc("DELETE /_fake/rules", func(w http.ResponseWriter, r *http.Request) {
		s.ClearRules()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("DELETE /_fake/rules/{id}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		found := s.removeRuleLocked(r.PathValue("id"))
		s.mu.Unlock()
		if !found {
			writeControl(w, http.StatusNotFound, map[string]string{"error": "no rule " + r.PathValue("id")})
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /_fake/calls", func(w http.ResponseWriter, r *http.Request) {
		key, model := r.URL.Query().Get("key"), r.URL.Query().Get("model")
		calls := s.CallsMatching(func(c Call) bool {
			return (key == "" || c.Key == key) && (model == "" || c.Model == model)
		})
		out := make([]callJSON, len(calls))
		for i, c := range calls {
			out[i] = callJSON{
				At: c.At, Method: c.Method, Path: c.Path, Query: c.Query, Header: c.Header,
				Key: c.Key, Model: c.Model, Stream: c.Stream, Body: string(c.Body), FileSize: c.FileSize,
				IdempotencyKey: c.IdempotencyKey, Rule: c.Rule, Status: c.Status, RateLimited: c.RateLimited,
			}
		}
		writeControl(w, http.StatusOK, out)
	})
	mux.HandleFunc("DELETE /_fake/calls", func(w http.ResponseWriter, r *http.Request) {
		s.ResetCalls()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /_fake/rate_limit", func(w http.ResponseWriter, r *http.Request) {
		writeControl(w, http.StatusOK, s.RateLimit())
	})
	mux.HandleFunc("PUT /_fake/rate_limit", func(w http.ResponseWriter, r *http.Request) {
		var l RateLimit
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&l); err != nil {
			writeControl(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		if err := s.SetRateLimit(l); err != nil {
			writeControl(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		writeControl(w, http.StatusOK, s.RateLimit())
	})
	mux.HandleFunc("DELETE /_fake/rate_limit", func(w http.ResponseWriter, r *http.Request) {
		_ = s.SetRateLimit(RateLimit{})
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /_fake/rate_limit/stats", func(w http.ResponseWriter, r *http.Request) {
		key, model := r.URL.Query().Get("key"), r.URL.Query().Get("model")
		out := []RateLimitStat{}
		for _, st := range s.RateLimitStats() {
			if (key == "" || st.Key == key) && (model == "" || st.Model == model) {
				out = append(out, st)
			}
		}
		writeControl(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /_fake/errors", func(w http.ResponseWriter, r *http.Request) {
		writeControl(w, http.StatusOK, ErrorNames())
	})
	// The image behind the URLs of /images/generations answers.
	mux.HandleFunc("GET /_fake/images/{name}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(fakePNG)
	})
	return mux
}

func writeControl(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
