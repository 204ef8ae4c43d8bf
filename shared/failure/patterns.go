package failure

import (
	"regexp"
	"strconv"
	"strings"
)

// kind is what a provider code says. Most kinds are a class; permission is
// resolved from the message (a bad key, no model access or a blocked region),
// and so is a failed precondition (a blocked region, or a model the project
// may not use).
type kind uint8

const (
	kindNone kind = iota
	kindClass
	kindPermission
	kindPrecondition
)

type codeMeaning struct {
	kind  kind
	class Class
}

func cls(c Class) codeMeaning { return codeMeaning{kind: kindClass, class: c} }

// strongCodes are provider codes, types, exception names, google.rpc reasons
// and status texts that decide a class on their own (keys are lower case).
var strongCodes = map[string]codeMeaning{
	// transient
	"server_error":                cls(Transient),
	"overloaded_error":            cls(Transient),
	"overloaded":                  cls(Transient),
	"engine_overloaded":           cls(Transient),
	"internal_error":              cls(Transient),
	"internal":                    cls(Transient),
	"unavailable":                 cls(Transient),
	"deadline_exceeded":           cls(Transient),
	"service_unavailable":         cls(Transient),
	"service_unavailable_error":   cls(Transient),
	"timeout":                     cls(Transient),
	"internalserverexception":     cls(Transient),
	"internalfailure":             cls(Transient),
	"serviceunavailableexception": cls(Transient),
	"modelnotreadyexception":      cls(Transient),
	"modeltimeoutexception":       cls(Transient),
	"modelerrorexception":         cls(Transient),
	"modelstreamerrorexception":   cls(Transient),
	"flex_tier_capacity_exceeded": cls(Transient),
	"model_capacity_exhausted":    cls(Transient), // Google: no capacity for the model, not the key's quota

	// rate limits
	"rate_limit_exceeded":             cls(RateLimit),
	"rate_limit_error":                cls(RateLimit),
	"rate_limited":                    cls(RateLimit),
	"ratelimitexceeded":               cls(RateLimit),
	"too_many_requests":               cls(RateLimit),
	"resource_exhausted":              cls(RateLimit),
	"throttlingexception":             cls(RateLimit),
	"servicequotaexceededexception":   cls(RateLimit),
	"toomanyrequestsexception":        cls(RateLimit),
	"service_tier_capacity_exceeded":  cls(Transient),
	"requests_per_minute_exceeded":    cls(RateLimit),
	"tokens_per_minute_limit_reached": cls(RateLimit),
	"rate_limit_reached":              cls(RateLimit),
	"rate_limit_reached_error":        cls(RateLimit), // Moonshot
	"too_many_requests_error":         cls(RateLimit), // Cerebras
	"too_many_tokens_error":           cls(RateLimit),
	"request_quota_exceeded":          cls(RateLimit), // Cerebras: per minute, hour or day (refined by the message)
	"token_quota_exceeded":            cls(RateLimit),

	// credentials
	"invalid_api_key":                     cls(CredentialRejected),
	"incorrect_api_key":                   cls(CredentialRejected),
	"authentication_error":                cls(CredentialRejected),
	"unauthenticated":                     cls(CredentialRejected),
	"api_key_invalid":                     cls(CredentialRejected),
	"api_key_expired":                     cls(CredentialRejected),
	"api_key_service_blocked":             cls(CredentialRejected),
	"api_key_http_referrer_blocked":       cls(CredentialRejected),
	"api_key_ip_address_blocked":          cls(CredentialRejected),
	"consumer_suspended":                  cls(CredentialRejected),
	"consumer_invalid":                    cls(CredentialRejected), // the key's project may not use the service
	"organization_restricted":             cls(CredentialRejected),
	"accessnotconfigured":                 cls(CredentialRejected), // legacy errors[].reason of SERVICE_DISABLED
	"service_disabled":                    cls(CredentialRejected),
	"credentials_missing":                 cls(CredentialRejected),
	"access_token_type_unsupported":       cls(CredentialRejected),
	"access_token_expired":                cls(CredentialRejected),
	"iam_permission_denied":               cls(CredentialRejected),
	"account_deactivated":                 cls(CredentialRejected),
	"organization_deactivated":            cls(CredentialRejected),
	"invalid_organization":                cls(CredentialRejected),
	"unrecognizedclientexception":         cls(CredentialRejected),
	"invalidsignatureexception":           cls(CredentialRejected),
	"expiredtokenexception":               cls(CredentialRejected),
	"incompletesignatureexception":        cls(CredentialRejected),
	"missingauthenticationtokenexception": cls(CredentialRejected),

	// permission: decided by the message
	"permission_error":      {kind: kindPermission},
	"permission_denied":     {kind: kindPermission},
	"permissiondenied":      {kind: kindPermission}, // Azure
	"forbidden":             {kind: kindPermission},
	"request_forbidden":     {kind: kindPermission},
	"accessdeniedexception": {kind: kindPermission},

	// quota and billing
	"insufficient_quota":           cls(QuotaExhausted),
	"billing_hard_limit_reached":   cls(QuotaExhausted),
	"billing_not_active":           cls(QuotaExhausted),
	"billing_error":                cls(QuotaExhausted),
	"insufficient_balance":         cls(QuotaExhausted),
	"insufficient_credits":         cls(QuotaExhausted),
	"payment_required":             cls(QuotaExhausted),
	"credit_limit_exceeded":        cls(QuotaExhausted),
	"exceeded_current_quota_error": cls(QuotaExhausted), // Moonshot, whatever the status
	"arrearage":                    cls(QuotaExhausted), // Alibaba Model Studio: the account is in arrears

	// models
	"model_not_found":           cls(ModelNotAccessible),
	"model_not_available":       cls(ModelNotAccessible),
	"model_not_accessible":      cls(ModelNotAccessible),
	"invalid_model":             cls(ModelNotAccessible),
	"deploymentnotfound":        cls(ModelNotAccessible),
	"deployment_not_found":      cls(ModelNotAccessible),
	"not_found_error":           cls(ModelNotAccessible),
	"not_found":                 cls(ModelNotAccessible),
	"notfounderror":             cls(ModelNotAccessible),
	"resourcenotfoundexception": cls(ModelNotAccessible),
	"model_decommissioned":      cls(ModelRetired),
	"model_deprecated":          cls(ModelRetired),
	"modeldeprecated":           cls(ModelRetired),

	// region
	"unsupported_country_region_territory": cls(RegionBlocked),
	"unsupported_country":                  cls(RegionBlocked),
	"failed_precondition":                  {kind: kindPrecondition}, // Gemini's unsupported location, or Vertex's model not enabled for the project
	"user_location_not_supported":          cls(RegionBlocked),

	// the request's fault
	"context_length_exceeded":      cls(RequestRejected),
	"string_above_max_length":      cls(RequestRejected),
	"content_filter":               cls(RequestRejected),
	"content_policy_violation":     cls(RequestRejected),
	"responsibleaipolicyviolation": cls(RequestRejected),
	"request_too_large":            cls(RequestRejected),
	"invalid_prompt":               cls(RequestRejected),
	"validationexception":          cls(RequestRejected),
	"payloadtoolargeexception":     cls(RequestRejected),

	// the request's fault: the Responses API's codes (a response.failed
	// event's response.error.code) for a refused prompt and for the images
	// the request gave, whatever the message sounds like ("Timeout while
	// downloading <url>" is the caller's URL timing out, not the target)
	"bio_policy":                     cls(RequestRejected),
	"misalignment_policy_violation":  cls(RequestRejected),
	"invalid_image":                  cls(RequestRejected),
	"invalid_image_format":           cls(RequestRejected),
	"invalid_base64_image":           cls(RequestRejected),
	"invalid_image_url":              cls(RequestRejected),
	"invalid_image_mode":             cls(RequestRejected),
	"image_too_large":                cls(RequestRejected),
	"image_too_small":                cls(RequestRejected),
	"image_parse_error":              cls(RequestRejected),
	"image_content_policy_violation": cls(RequestRejected),
	"image_file_too_large":           cls(RequestRejected),
	"image_file_not_found":           cls(RequestRejected),
	"unsupported_image_media_type":   cls(RequestRejected),
	"empty_image_file":               cls(RequestRejected),
	"failed_to_download_image":       cls(RequestRejected),
}

// weakCodes are generic codes that several providers reuse for unrelated
// failures (DeepSeek sends "invalid_request_error" with "Insufficient
// Balance", Anthropic with "credit balance is too low"): they count only
// after the message patterns found nothing.
var weakCodes = map[string]Class{
	"invalid_request_error": RequestRejected,
	"invalid_request":       RequestRejected,
	"invalid_argument":      RequestRejected,
	"bad_request":           RequestRejected,
	"badrequest":            RequestRejected,
	"badrequesterror":       RequestRejected,
	"validation_error":      RequestRejected,
	"unprocessable_entity":  RequestRejected,
	"out_of_range":          RequestRejected,
	"api_error":             Transient,
	"apierror":              Transient,
	"internalservererror":   Transient,
	"unknown_error":         Unrecognised,
}

func normCode(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if i := strings.IndexByte(s, ':'); i > 0 { // "ThrottlingException:http://internal.amazon.com/..."
		s = s[:i]
	}
	return s
}

// A message pattern and the class it means, tried in order.
type messagePattern struct {
	re    *regexp.Regexp
	class Class
}

var (
	regionRE = regexp.MustCompile(`(?i)user location is not supported|unsupported[_ ]countr|countr(y|ies),? regions?,? (or|and) territor|not (available|supported|allowed) (in|from) your (country|region|location|territory)|not allowed from unsupported|(region|location) is not supported|unavailable in your (country|region)`)

	retiredRE      = regexp.MustCompile(`(?i)\b(deprecated|decommissioned|retired|sunset|discontinued|no longer (available|supported|served|accessible|offered)|end[- ]of[- ]life|end of its life|has been shut ?down|(has been|was) removed|(reached|past) (its|the) end of (life|support))\b`)
	modelMentionRE = regexp.MustCompile(`(?i)\bmodels?\b`)

	quotaRE = regexp.MustCompile(`(?i)credit balance is too low|insufficient[_ ](balance|credits?|funds|quota)|exceeded your current quota|(doesn't|does not|don't) have (any|enough) credits|not enough credits|(used|exhausted) all (available )?credits|out of credits|credit limit|(purchase|buy|add) (more )?credits|spending limit|billing hard limit|payment (required|method)|requires more credits|can only afford|trial key.*\b(month|monthly)\b|\bbalance (is )?(insufficient|exhausted|too low)|exceeded (your )?current quota|key limit exceeded|\bbudget (has been )?exceeded|exceeded (the |your )?budget|余额不足|欠费|请充值`)

	credentialRE = regexp.MustCompile(`(?i)incorrect api key|invalid[ _-]?(x-)?api[ _-]?key|api[ _-]?key (is )?(not valid|invalid|not found|expired|revoked|disabled)|invalid (api |access |auth(entication)? |bearer )?token|authentication fail|invalid authentication|no auth credentials|\bunauthori[sz]ed\b|\bunauthenticated\b|security token included in the request is invalid|invalid subscription key|user not found|(account|organization|api key|key) (has been )?(deactivated|disabled|suspended|revoked|restricted)|missing (api key|authentication)|invalid authentication credentials|unregistered callers|API has not been used in project|API (is )?not enabled (for|in|on) (this|the|your) project`)

	modelAccessRE = regexp.MustCompile("(?i)\\bmodel\\b.{0,160}\\b(does not exist|doesn't exist|not found|is not available|unavailable|was not found)|no endpoints found|(do not|don't|does not|doesn't) have access to (the |this )?(model|deployment)|not allowed to \\w+( from)? (this|the) model|\\b(unknown|invalid) model\\b|deployment .{0,120}(does not exist|not found)|try pulling it first|model_not_found|\\bmodel (does )?not exists?\\b|\\bmodel requires more (system |gpu )?memory|organization must be verified|not a valid model( id)?\\b|model identifier is invalid|access to (the )?model (is )?denied|eligible for (using )?(the|this) model|模型.{0,20}不存在")

	tooLargeRE  = regexp.MustCompile(`(?i)request too large|payload too large|request entity too large`)
	limitNumRE  = regexp.MustCompile(`(?i)\blimit:?\s*([\d,]+)`)
	requestedRE = regexp.MustCompile(`(?i)\brequested:?\s*([\d,]+)`)

	requestSpecificRE = regexp.MustCompile(`(?i)context[_ ]length|maximum context|context window|prompt is too long|input (is )?too long|too many (input )?tokens:|exceeds? the maximum|cannot exceed|reduce the length|reduce your (message|prompt)|content (management )?policy|content[_ ]filter|flagged|input validation error`)

	rateRE = regexp.MustCompile(`(?i)rate[ _-]?limit|too many (requests|tokens)|throttl|(requests|tokens|calls) ?(per|/) ?(minute|min|second|sec|day)\b|concurren(cy|t request)|temporarily rate-limited|resource (has been )?exhausted|please wait before trying again`)

	requestGenericRE = regexp.MustCompile(`(?i)invalid (request|parameter|argument|value|schema|json|input)|field required|unsupported (parameter|value)|unrecognized request argument|is required|missing required|bad request|malformed|must be (a|an|one of|less|greater|at)\b`)

	// misroutedRE: the base URL speaks plain HTTP to a TLS port (Go's and
	// nginx's own 400): the target is misconfigured, not the request.
	misroutedRE = regexp.MustCompile(`(?i)sent an HTTP request to an HTTPS server|plain HTTP request was sent to HTTPS port`)
	transientRE = regexp.MustCompile(`(?i)overloaded|over capacity|capacity (exceeded|constraints)|temporarily unavailable|service unavailable|\bunavailable\b|internal (server )?error|server (had an )?error|bad gateway|gateway time-?out|upstream (connect )?error|timed? ?out|try again later|connection (reset|refused|closed)|high demand|no available (model )?provider|\bdegraded\b|访问量过大`)

	// periodRE: a limit counted per day or month. Once it is spent it stays
	// spent until the period resets: a quota, not a short rate limit.
	periodRE = regexp.MustCompile(`(?i)\bper[ _-]?(day|month)\b|\b(daily|monthly)\b|\b(RPD|TPD)\b|\b(requests?|tokens?|calls?)\s*(per|/)\s*(day|month)\b|PerDay`)

	// zeroLimitRE: a quota whose limit is 0 ("limit: 0, model: gemini-2.5-pro"):
	// the key's tier has no allowance for the model at all.
	zeroLimitRE = regexp.MustCompile(`(?i)\blimit:?\s*0(?:[,;)\]\s]|$)`)

	// paidOnlyRE: a model the key's (free) tier may not use ("The selected
	// model requires paid balance", "... doesn't have a free quota tier").
	paidOnlyRE = regexp.MustCompile(`(?i)\bmodels?\b.{0,80}\brequires? (a )?paid (balance|tier|plan|account|subscription)|(doesn't|does not) have a free (quota )?tier|not available (on|in|for) (the )?free tier|free tier (is )?not (available|supported) for (this|the) model`)

	// unservedRE: the model cannot be called this way on this target
	// (Bedrock: only through an inference profile). It reads like a
	// throughput or validation error, but it is about the model.
	unservedRE = regexp.MustCompile(`(?i)on-demand throughput isn.t supported|(doesn.t|does not) support on-demand throughput|model identifier is invalid`)

	// callerResourceRE: Google refuses a file or cached content the
	// request names (an upload of another key's project, or one that
	// expired) as PERMISSION_DENIED, "You do not have permission to access
	// the File abc or it may not exist": the request's fault, not the key's.
	callerResourceRE = regexp.MustCompile(`(?i)permission to access the (File|CachedContent)\b.{0,200}\bor it may not exist`)

	// anthropicModelLimitRE: Anthropic sets its rate limits (RPM, ITPM,
	// OTPM) per model class, and a model class's limit is named by what it
	// counts ("30,000 input tokens per minute"): that model's limit, even
	// in the older messages that do not name the model. A limit of the
	// account ("would exceed your account's rate limit") is not.
	anthropicModelLimitRE = regexp.MustCompile(`(?i)\b(input |output )?tokens per minute\b|\brequests per minute\b|\bper-minute rate limit\b`)

	perModelRE = regexp.MustCompile("(?i)rate limit reached for (model )?`?[\\w./:-]+`? in organization|\\b(for|on) (the )?model\\b|\\bmodel[:=]\\s*\\S|per[ _-]?model|for this model|base model|rate-limited upstream|model_id")
)

// messagePatterns decide from the message when no strong code did.
var messagePatterns = []messagePattern{
	{misroutedRE, Transient},
	{regionRE, RegionBlocked},
	{paidOnlyRE, ModelNotAccessible},
	{requestSpecificRE, RequestRejected},
	{quotaRE, QuotaExhausted},
	{credentialRE, CredentialRejected},
	{modelAccessRE, ModelNotAccessible},
	{tooLargeRE, RequestRejected},
	{rateRE, RateLimit},
	{requestGenericRE, RequestRejected},
	{transientRE, Transient},
}

// tooLarge reports whether a rate-limit message says the request alone is
// larger than the whole limit ("Limit 30000, Requested 45000"): waiting
// cannot help, the request has to change.
func tooLarge(msg string) bool {
	if tooLargeRE.MatchString(msg) {
		return true
	}
	l := limitNumRE.FindStringSubmatch(msg)
	r := requestedRE.FindStringSubmatch(msg)
	if l == nil || r == nil {
		return false
	}
	lim, err1 := strconv.ParseInt(strings.ReplaceAll(l[1], ",", ""), 10, 64)
	req, err2 := strconv.ParseInt(strings.ReplaceAll(r[1], ",", ""), 10, 64)
	return err1 == nil && err2 == nil && req > lim
}
