package failure

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Classify decides what a failed attempt says about its target, with the
// wall clock for HTTP-date waits. See the package documentation for the
// order of evidence.
func Classify(in Input) Result {
	return ClassifyAt(in, time.Now())
}

// ClassifyAt is Classify with an explicit clock: Retry-After dates and
// reset instants are measured from now.
func ClassifyAt(in Input, now time.Time) Result {
	r, _ := classify(in, now)
	return r
}

// Family maps a provider type to the error family the classifier knows:
// openai, azure, anthropic, gemini, vertex, bedrock, openrouter, mistral,
// groq, deepseek, together, cohere, xai, or openai-compatible (vllm, ollama
// and anything else).
func Family(providerType string) string {
	switch t := strings.ToLower(strings.TrimSpace(providerType)); t {
	case "openai", "azure", "anthropic", "gemini", "vertex", "bedrock", "openrouter",
		"mistral", "groq", "deepseek", "together", "cohere", "xai":
		return t
	case "azure-openai", "azure_openai", "azureopenai":
		return "azure"
	case "google", "google-ai", "googleai", "gemini-openai":
		return "gemini"
	case "vertex-ai", "vertexai", "google-vertex":
		return "vertex"
	case "aws-bedrock", "aws_bedrock", "bedrock-runtime":
		return "bedrock"
	case "x-ai", "grok":
		return "xai"
	case "togetherai", "together-ai":
		return "together"
	}
	return "openai-compatible"
}

// classify returns the built-in result and the decoded body, so that rules
// can match on it without decoding twice.
func classify(in Input, now time.Time) (Result, *signal) {
	if in.Err != nil {
		return classifyTransport(in.Err), &signal{message: clip(in.Err.Error())}
	}
	fam := Family(in.Provider)
	sig := decodeSignal(in.Body, 0)
	if h := in.Header.Get("X-Amzn-Errortype"); h != "" && sig.exception == "" {
		sig.exception = h
	}
	if in.Status == 0 && !in.Stream && len(in.Body) == 0 {
		return Result{Class: Transient, Code: "transport_error", Reason: "no response"}, sig
	}

	layers := sig.layers()
	status := effectiveStatus(in.Status, layers)
	class, code, reason, ok, keyDependent := decideByCode(layers)
	generic := false
	if !ok {
		class, reason, ok, generic = decideByMessage(layers)
		if c := ownCode(layers); ok && class == Transient && requestStatus(status) && c != "" {
			// A 400 with a code of its own (invalid_image_url,
			// invalid_value) is the provider's word on the request:
			// "Timeout while downloading <url>" is the caller's URL timing
			// out, not the target. The 4xx that are the target's (a plain
			// HTTP request to a TLS port, NVIDIA's "DEGRADED function")
			// carry no such code.
			class, reason = RequestRejected, "status "+strconv.Itoa(status)+" with provider code "+c+"; the message's trouble is the request's"
		}
	}
	if !ok {
		class, code, reason, ok = decideByWeakCode(layers)
		generic = ok
	}
	if ok && generic && statusDecides(status) {
		// A generic code or message ("invalid_request_error", which
		// OpenAI gives every 4xx, "must be a member of an organization")
		// says less than a 401, 402, 429 or 5xx does.
		ok, code = false, ""
	}
	if !ok {
		class, reason = decideByStatus(status, in.Stream)
	}
	class, reason, how := refine(class, reason, layers)

	res := Result{Class: class, Scope: class.DefaultScope(), Code: code, Reason: reason}
	// Only Google's own refusal (its permission code, resolved by the
	// message): a message quoting the phrase back (a caller's value in
	// another provider's 400) must not make a request rotate.
	res.KeyDependent = keyDependent && class == RequestRejected && (fam == "gemini" || fam == "vertex")
	if res.Code == "" {
		res.Code = primaryCode(layers, status)
	}
	if (class == RateLimit || how == refinedPeriod) && perModel(fam, sig, layers) {
		res.Scope = ScopeKeyModel
	}
	switch how {
	case refinedNone:
		if class != RequestRejected {
			res.RetryAfter, res.HasWait = statedWait(in.Header, sig, class, now)
		}
	case refinedPeriod:
		// A spent daily quota: the reset of the period counts (headers,
		// OpenRouter's X-RateLimit-Reset, "try again in 9m38s"); a hint
		// under a minute is the refill of one request, not the reset.
		if d, ok := statedWait(in.Header, sig, RateLimit, now); ok && d >= time.Minute {
			res.RetryAfter, res.HasWait = d, true
		}
	}
	// refinedNoAllowance: a limit of 0 does not reset; the "retry in 20s"
	// that comes with it says nothing, so the class's ladder applies.
	return res, sig
}

// How refine changed a rate limit: the stated wait and the scope depend on it.
type refinement uint8

const (
	refinedNone        refinement = iota
	refinedPeriod                 // a per-day (or per-month) limit that is spent: quota_exhausted
	refinedNoAllowance            // a limit of 0, or a paid-only model: model_not_accessible
)

// decideByCode looks for a strong provider code in every layer, outermost
// first: exception name, google.rpc reasons, code, type, status text.
// keyDependent: a permission code that another key may not give
// (permission).
func decideByCode(layers []*signal) (class Class, code, reason string, ok, keyDependent bool) {
	for _, l := range layers {
		for _, c := range l.codes() {
			m, ok := strongCodes[normCode(c)]
			if !ok {
				continue
			}
			code := strings.TrimSpace(c)
			if i := strings.IndexByte(code, ':'); i > 0 {
				code = code[:i]
			}
			switch m.kind {
			case kindPermission:
				class, why, keyDep := permission(l)
				return class, code, "provider code " + code + ": " + why, true, keyDep
			case kindPrecondition:
				class, why := precondition(l)
				return class, code, "provider code " + code + ": " + why, true, false
			}
			return m.class, code, "provider code " + code, true, false
		}
	}
	return Unrecognised, "", "", false, false
}

// codes returns a layer's codes in order of specificity.
func (s *signal) codes() []string {
	out := make([]string, 0, 4+len(s.reasons))
	if s.exception != "" {
		out = append(out, s.exception)
	}
	out = append(out, s.reasons...)
	for _, c := range []string{s.code, s.inner, s.typ, s.statusText} {
		if c != "" {
			out = append(out, c)
		}
	}
	return out
}

// permission resolves a 403-style "permission denied": a blocked region, a
// file or cached content the request names, no access to a model, or
// (otherwise) a credential that may not do this.
func permission(l *signal) (class Class, why string, keyDependent bool) {
	msg := l.message
	switch {
	case regionRE.MatchString(msg) || strings.EqualFold(strings.TrimSpace(msg), "request not allowed"):
		// Anthropic answers unsupported regions with
		// {"type":"forbidden","message":"Request not allowed"}.
		return RegionBlocked, "region blocked", false
	case callerResourceRE.MatchString(msg):
		// Gemini's file or cached content the caller named: uploaded with
		// another key's project, expired (files live 48 hours) or never
		// there. Holding this key would hold every key of the provider
		// in turn; another key (of the project that has the upload) may
		// serve it, so the result is KeyDependent: the request rotates,
		// nothing is held.
		return RequestRejected, "the request names a file or cached content this key cannot read", true
	case quotaRE.MatchString(msg):
		return QuotaExhausted, "no credits", false
	case modelMentionRE.MatchString(msg):
		return ModelNotAccessible, "no access to the model", false
	}
	return CredentialRejected, "credential not permitted", false
}

// precondition resolves a google.rpc FAILED_PRECONDITION: Gemini answers a
// caller in an unsupported location with it, Vertex a project that may not
// use a publisher model ("Project ... is not allowed to use Publisher Model
// .../locations/asia-southeast1/...": a location in the resource name, but a
// refusal of the model).
func precondition(l *signal) (Class, string) {
	if !regionRE.MatchString(l.message) && modelMentionRE.MatchString(l.message) {
		return ModelNotAccessible, "the project may not use the model"
	}
	return RegionBlocked, "region blocked"
}

// decideByMessage looks for a message pattern in every layer, outermost
// first; generic reports a pattern that says little (requestGenericRE).
func decideByMessage(layers []*signal) (class Class, reason string, ok, generic bool) {
	for _, l := range layers {
		if l.message == "" {
			continue
		}
		for _, p := range messagePatterns {
			if p.re.MatchString(l.message) {
				return p.class, "message: " + p.class.String(), true, p.re == requestGenericRE
			}
		}
	}
	return Unrecognised, "", false, false
}

// statusDecides reports whether status says more about a failure than a
// generic code or message: 401 (the credential), 402 (payment), 429 (a
// limit) and 5xx (the server). 400, 403, 404, 413 and 422 do not: a 404
// "invalid_request_error" may be a file the caller named that does not
// exist, nothing about the target.
func statusDecides(status int) bool {
	return status == 401 || status == 402 || status == 429 || status >= 500 && status <= 599
}

// requestStatus reports whether status, with nothing else recognisable,
// is the request's fault: 400, 413 and 422.
func requestStatus(status int) bool {
	return status == 400 || status == 413 || status == 422
}

// ownCode is the first code a body carries that names its failure (an
// exception name, a google.rpc reason, error.code, Azure's innererror.code),
// other than a generic one (invalid_request_error) or a number: "" if none.
func ownCode(layers []*signal) string {
	for _, l := range layers {
		for _, c := range append(append([]string{l.exception}, l.reasons...), l.code, l.inner) {
			if c == "" {
				continue
			}
			if _, weak := weakCodes[normCode(c)]; weak {
				continue
			}
			if _, err := strconv.Atoi(c); err == nil {
				continue
			}
			return c
		}
	}
	return ""
}

func decideByWeakCode(layers []*signal) (Class, string, string, bool) {
	for _, l := range layers {
		for _, c := range l.codes() {
			if class, ok := weakCodes[normCode(c)]; ok && class != Unrecognised {
				return class, c, "generic provider code " + c, true
			}
		}
	}
	return Unrecognised, "", "", false
}

// effectiveStatus is the HTTP status, or the status an error body carries
// when the transport said 200 or nothing (a stream error event, an error
// hidden behind 200).
func effectiveStatus(status int, layers []*signal) int {
	if status != 0 && status != 200 {
		return status
	}
	for _, l := range layers {
		if l.numCode >= 400 {
			return l.numCode
		}
	}
	return status
}

// decideByStatus is the last resort. 400, 413 and 422 with nothing
// recognisable are the request's fault; other unknown 4xx are unrecognised.
func decideByStatus(status int, stream bool) (Class, string) {
	switch {
	case status == 401:
		return CredentialRejected, "status 401"
	case status == 402:
		return QuotaExhausted, "status 402"
	case status == 403, status == 404:
		return ModelNotAccessible, "status " + strconv.Itoa(status)
	case status == 408:
		return Transient, "status 408"
	case status == 429:
		return RateLimit, "status 429"
	case requestStatus(status):
		return RequestRejected, "status " + strconv.Itoa(status)
	case status >= 500 && status <= 599:
		return Transient, "status " + strconv.Itoa(status)
	case stream && (status == 0 || status == 200):
		return Transient, "stream error event"
	case status >= 400 && status <= 499:
		return Unrecognised, "status " + strconv.Itoa(status)
	}
	return Unrecognised, "no recognisable error"
}

// refine lets the message sharpen a class: a missing model that is retired,
// a refusal that is a blocked region, a validation error that is about the
// model, a rate limit the request alone exceeds, a rate limit whose limit is
// 0 for the model (no access), or one counted per day (a spent quota).
func refine(class Class, reason string, layers []*signal) (Class, string, refinement) {
	for _, l := range layers {
		msg := l.message
		if msg == "" {
			continue
		}
		switch class {
		case ModelNotAccessible:
			if regionRE.MatchString(msg) {
				return RegionBlocked, reason + "; message names a region", refinedNone
			}
			if retiredRE.MatchString(msg) {
				return ModelRetired, reason + "; message says retired", refinedNone
			}
		case RequestRejected, CredentialRejected, Unrecognised:
			if regionRE.MatchString(msg) {
				return RegionBlocked, reason + "; message names a region", refinedNone
			}
			if class == RequestRejected && retiredRE.MatchString(msg) && modelMentionRE.MatchString(msg) {
				return ModelRetired, reason + "; message says the model is retired", refinedNone
			}
			if class == RequestRejected && unservedRE.MatchString(msg) {
				return ModelNotAccessible, reason + "; the model is not served this way on this target", refinedNone
			}
		case RateLimit:
			if tooLarge(msg) {
				return RequestRejected, reason + "; request exceeds the whole limit", refinedNone
			}
		}
	}
	if class != RateLimit {
		return class, reason, refinedNone
	}
	for _, l := range layers {
		if l.zeroQuota || zeroLimitRE.MatchString(l.message) || paidOnlyRE.MatchString(l.message) {
			return ModelNotAccessible, reason + "; no allowance for the model on this key (limit 0)", refinedNoAllowance
		}
	}
	for _, l := range layers {
		if l.dayQuota || periodRE.MatchString(l.message) {
			return QuotaExhausted, reason + "; a per-day limit, spent until it resets", refinedPeriod
		}
	}
	return class, reason, refinedNone
}

// perModel reports whether a rate limit is per model. Azure limits are per
// deployment and Bedrock on-demand quotas per model, so theirs always are;
// Anthropic's per-minute limits are per model class, so an Opus burst does
// not hold Haiku on the same key.
func perModel(fam string, sig *signal, layers []*signal) bool {
	if fam == "azure" || fam == "bedrock" {
		return true
	}
	for _, l := range layers {
		if l.modelQuota || perModelRE.MatchString(l.message) {
			return true
		}
		if fam == "anthropic" && anthropicModelLimitRE.MatchString(l.message) {
			return true
		}
	}
	return sig.modelQuota
}

// primaryCode is the most specific code in the body, or the status.
func primaryCode(layers []*signal, status int) string {
	for _, l := range layers {
		if cs := l.codes(); len(cs) > 0 {
			c := cs[0]
			if i := strings.IndexByte(c, ':'); i > 0 {
				c = c[:i]
			}
			return c
		}
	}
	for _, l := range layers {
		if l.numCode != 0 {
			return strconv.Itoa(l.numCode)
		}
	}
	if status != 0 {
		return strconv.Itoa(status)
	}
	return ""
}

// classifyTransport classifies an attempt that got no HTTP answer. A
// caller's cancellation says nothing about the target: it is unrecognised
// with code "canceled", never transient, so it never feeds a breaker.
func classifyTransport(err error) Result {
	text := strings.ToLower(err.Error())
	switch {
	case errors.Is(err, context.Canceled) || strings.Contains(text, "context canceled"):
		return Result{Class: Unrecognised, Code: "canceled", Reason: "canceled by the caller"}
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(text, "timeout") ||
		strings.Contains(text, "deadline exceeded") || strings.Contains(text, "timed out"):
		return Result{Class: Transient, Code: "timeout", Reason: "transport: timeout"}
	case strings.Contains(text, "connection refused"):
		return Result{Class: Transient, Code: "connection_refused", Reason: "transport: connection refused"}
	case strings.Contains(text, "connection reset") || strings.Contains(text, "broken pipe"):
		return Result{Class: Transient, Code: "connection_reset", Reason: "transport: connection reset"}
	case strings.Contains(text, "no such host") || strings.Contains(text, "server misbehaving"):
		return Result{Class: Transient, Code: "dns_error", Reason: "transport: name resolution failed"}
	case strings.Contains(text, "tls") || strings.Contains(text, "x509") || strings.Contains(text, "certificate"):
		return Result{Class: Transient, Code: "tls_error", Reason: "transport: TLS failure"}
	case strings.Contains(text, "eof"):
		return Result{Class: Transient, Code: "connection_closed", Reason: "transport: connection closed"}
	}
	return Result{Class: Transient, Code: "transport_error", Reason: "transport error"}
}
