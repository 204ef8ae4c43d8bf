package fakeprovider

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// What the rate limiter adds to a call: the tokens it counts, the headers
// of its answer, and the error a refused call gets.

// limited reports whether the rate limiter counts calls of the endpoint:
// every provider call but /models and unknown paths.
func (e endpoint) limited() bool { return e != endpointModels && e != endpointUnknown }

// callTokens is what the rate limiter counts for a call: the input and
// output tokens of the usage its answer reports (chunks content chunks).
// Moderations, speech and count_tokens report none and count 0.
func callTokens(req *request, chunks int) int64 {
	out := 2 * chunks
	var n int
	switch req.endpoint {
	case endpointChat, endpointMessages:
		n = promptTokens(req.body) + out
	case endpointCompletions:
		n = completionPromptTokens(req.body.Prompt) + out
	case endpointResponses:
		n = responseInputTokens(req.body) + out
	case endpointTranscriptions:
		n = int(audioSeconds(req.call.FileSize))*10 + out
	case endpointEmbeddings:
		inputs, _ := embeddingInputs(req.body.Input)
		for _, in := range inputs {
			n += max(len(strings.Fields(in)), 1)
		}
	case endpointImages:
		n = imagesTokens(req.body)
	}
	return int64(n)
}

// limitDialect is the header family a call's answer states its limits in.
type limitDialect uint8

const (
	dialectOpenAI     limitDialect = iota // x-ratelimit-{limit,remaining,reset}-{requests,tokens}; OpenAI, Azure, Gemini compat
	dialectAnthropic                      // anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}
	dialectOpenRouter                     // X-RateLimit-{Limit,Remaining,Reset}: requests
)

// isOpenRouter reports whether the call came through an OpenRouter base
// URL (https://openrouter.ai/api/v1).
func isOpenRouter(req *request) bool { return strings.Contains(req.call.Path, "/api/v1/") }

func dialectOf(req *request) limitDialect {
	switch {
	case req.flavor == flavorAnthropic:
		return dialectAnthropic
	case isOpenRouter(req):
		return dialectOpenRouter
	}
	return dialectOpenAI
}

// limitError is the error a refused call gets: the flavour's rate limit
// (for the kind that ran out where the provider words them apart), or
// OpenAI's "Request too large" for a call no window can hold.
func limitError(req *request, v *limitVerdict) string {
	tokens := v.refused == refusedTokens || v.refused == refusedTooLarge
	switch {
	case req.flavor == flavorAnthropic && tokens:
		return "anthropic.rate_limit_tokens"
	case req.flavor == flavorAnthropic:
		return "anthropic.rate_limit"
	case req.flavor == flavorAzure:
		return "azure.rate_limit"
	case req.flavor == flavorGemini:
		return "gemini.resource_exhausted"
	case isOpenRouter(req):
		return "openrouter.rate_limit_key"
	case v.refused == refusedTooLarge:
		return "openai.request_too_large"
	case tokens:
		return "openai.rate_limit_tokens"
	}
	return "openai.rate_limit"
}

// limitParams fills a refused call's error with the numbers of the limit
// it ran into.
func limitParams(p *errorParams, v *limitVerdict) {
	if v == nil || v.refused == notRefused {
		return
	}
	p.Reset = v.reset
	if v.refused == refusedRequests {
		p.Limit, p.Used, p.Requested = v.limit.Requests, v.requestsUsed, 1
		return
	}
	p.Limit, p.Used, p.Requested = v.limit.Tokens, v.tokensUsed, v.tokens
}

// limitWait is the wait a refused call is told: until its window resets,
// at least a millisecond; none for a call too large for any window (OpenAI
// states none), which the other flavours tell to come back at the reset.
func limitWait(req *request, v *limitVerdict) time.Duration {
	if limitError(req, v) == "openai.request_too_large" {
		return 0
	}
	return max(v.retryAfter, time.Millisecond)
}

// setLimitHeaders states the call's rate limits in its flavour's headers,
// replacing any an error of the library carries.
func (s *Server) setLimitHeaders(h http.Header, req *request) {
	v := req.limit
	if v == nil {
		return
	}
	d := dialectOf(req)
	prefix := "x-ratelimit-"
	if d == dialectAnthropic {
		prefix = "anthropic-ratelimit-"
	}
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), prefix) {
			delete(h, k)
		}
	}
	now := s.clock.Now()
	type window struct {
		kind        string
		limit, left int64
	}
	var windows []window
	if v.limit.Requests > 0 {
		windows = append(windows, window{"requests", v.limit.Requests, v.requestsLeft})
	}
	if v.limit.Tokens > 0 {
		windows = append(windows, window{"tokens", v.limit.Tokens, v.tokensLeft})
	}
	for _, w := range windows {
		limit, left := strconv.FormatInt(w.limit, 10), strconv.FormatInt(w.left, 10)
		switch d {
		case dialectOpenAI:
			h.Set("x-ratelimit-limit-"+w.kind, limit)
			h.Set("x-ratelimit-remaining-"+w.kind, left)
			h.Set("x-ratelimit-reset-"+w.kind, openAIReset(v.reset.Sub(now)))
		case dialectAnthropic:
			h.Set("anthropic-ratelimit-"+w.kind+"-limit", limit)
			h.Set("anthropic-ratelimit-"+w.kind+"-remaining", left)
			h.Set("anthropic-ratelimit-"+w.kind+"-reset", anthropicReset(v.reset))
		case dialectOpenRouter:
			if w.kind == "requests" {
				h.Set("X-RateLimit-Limit", limit)
				h.Set("X-RateLimit-Remaining", left)
				h.Set("X-RateLimit-Reset", strconv.FormatInt(epochMillis(v.reset), 10))
			}
		}
	}
	if v.refused != notRefused {
		if wait := limitWait(req, v); wait > 0 {
			h.Set("Retry-After", strconv.FormatInt(ceilDiv(int64(wait), int64(time.Second)), 10))
		}
	}
}

// openAIReset writes a time to reset as OpenAI does ("20ms", "1s",
// "59.56s", "6m0s"): a Go duration, rounded up to 10 ms.
func openAIReset(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	const step = 10 * time.Millisecond
	return (time.Duration(ceilDiv(int64(d), int64(step))) * step).String()
}

// anthropicReset writes a reset instant as Anthropic does: RFC 3339 in
// UTC, with the fraction of a second (rounded up to the millisecond) when
// there is one.
func anthropicReset(t time.Time) string {
	t = t.UTC()
	if ms := t.Truncate(time.Millisecond); ms.Before(t) {
		t = ms.Add(time.Millisecond)
	}
	return t.Format(time.RFC3339Nano)
}

// epochMillis is t in unix milliseconds, rounded up.
func epochMillis(t time.Time) int64 { return ceilDiv(t.UnixNano(), int64(time.Millisecond)) }

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
