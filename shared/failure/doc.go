// Package failure classifies a failed upstream attempt: what it says about
// the target (class), how much of the fleet's capacity a hold should cover
// (scope), the wait the provider stated, the provider's own error code and a
// short reason.
//
// # Order of evidence
//
// The provider's own signal decides first, the status code last:
//
//  1. A transport error (Input.Err) is transient, except a caller's
//     cancellation ("context canceled"), which is unrecognised with code
//     "canceled" so that it never counts against a target.
//  2. Strong provider codes, in every layer of the body (outermost first,
//     then a nested upstream error such as OpenRouter's error.metadata.raw,
//     a JSON string, text or object): the AWS exception name
//     (x-amzn-errortype header, __type, or the key of an event-stream
//     exception), google.rpc details[].reason (API_KEY_INVALID,
//     SERVICE_DISABLED, ...), error.code, error.type, google.rpc status text
//     (RESOURCE_EXHAUSTED, FAILED_PRECONDITION, PERMISSION_DENIED, ...).
//     The OpenAI Responses API's stream events are read the same way: a
//     response.failed event by its response.error (invalid_prompt,
//     rate_limit_exceeded, server_error, the image codes), an error event
//     ({"type":"error","code":...}) by its own code.
//     Permission codes (permission_error, PERMISSION_DENIED,
//     PermissionDenied, AccessDeniedException, forbidden) are resolved by
//     the message: a region, a file or cached content the request names
//     (Gemini: "You do not have permission to access the File ... or it
//     may not exist", request_rejected and KeyDependent: another key's
//     project may hold the upload, so the request rotates without a
//     hold), no credits, a model, else the credential.
//     FAILED_PRECONDITION is a blocked region unless the message refuses a
//     model without naming the caller's location (Vertex: "Project ... is
//     not allowed to use Publisher Model .../locations/...").
//  3. Message patterns: region, a paid-only model, context length/content
//     filter, quota/billing (also in Chinese: 余额不足, 欠费), credential
//     (including "API has not been used in project"), model access ("does
//     not exist", "not a valid model ID", 模型不存在, "organization must be
//     verified"), request too large, rate limit, invalid request,
//     overloaded/unavailable. A message that only sounds transient does not
//     make a 400, 413 or 422 that carries a code of its own transient
//     (OpenAI's invalid_image_url "Timeout while downloading <url>" is the
//     caller's URL): it is request_rejected. The 4xx that are the target's
//     carry no such code (plain HTTP sent to a TLS port, NVIDIA's
//     "DEGRADED function cannot be invoked").
//  4. Generic codes several providers reuse for unrelated failures
//     (invalid_request_error, INVALID_ARGUMENT, api_error). These and the
//     generic "invalid request" patterns of step 3 ("must be a", "is
//     required") yield to a status that says more: 401, 402, 429 and 5xx
//     (OpenAI gives every 4xx the type invalid_request_error, so a 401
//     "You must be a member of an organization" is a refused credential).
//  5. The HTTP status (or the status an error body carries when the
//     transport said 200 or it arrived as a stream event): 401 credential,
//     402 quota, 403 and 404 model_not_accessible (the narrowest hold that
//     stops the waste; a probe re-checks), 408 transient, 429 rate_limit,
//     5xx and 529 transient, 400/413/422 request_rejected, any other 4xx
//     unrecognised. A stream error event with nothing recognisable is
//     transient.
//
// The message then refines the class: a missing model whose message says
// deprecated/decommissioned/retired/removed/no longer available is
// model_retired (one that only says not found stays model_not_accessible:
// the evidence does not say retired); a refusal naming a location is
// region_blocked; a validation error saying the model cannot be invoked
// this way (Bedrock's "on-demand throughput isn't supported", "The provided
// model identifier is invalid") is model_not_accessible; and a rate limit is
//
//   - request_rejected when the request alone exceeds it ("Limit 30000,
//     Requested 45000");
//   - model_not_accessible when its limit is 0 ("limit: 0, model:
//     gemini-2.5-pro", a QuotaFailure quotaValue of 0) or the model has no
//     free tier or needs a paid balance: the key has no access to the model;
//   - quota_exhausted when it is counted per day or month (RPD, TPD,
//     "tokens per day", "free-models-per-day", a PerDay quotaId): it stays
//     spent until the period resets, it is not a short rate limit.
//
// Known traps handled: OpenAI insufficient_quota is a 429 that means quota;
// Anthropic "credit balance is too low" and DeepSeek "Insufficient Balance"
// carry invalid_request_error; Gemini API_KEY_INVALID is a 400; xAI answers
// a bad key with 400 "Incorrect API key provided"; Moonshot's
// exceeded_current_quota_error comes as a 403 or a 429, Alibaba's Arrearage
// as a 400 and Zhipu's arrears (code 1113) as a 429; Gemini's free tier
// answers a model it does not cover with RESOURCE_EXHAUSTED and limit 0;
// Google's MODEL_CAPACITY_EXHAUSTED is a RESOURCE_EXHAUSTED that is
// capacity (transient), not the key's quota; SERVICE_DISABLED,
// accessNotConfigured and CONSUMER_INVALID refuse the key's project.
//
// # Scopes
//
// credential_rejected and quota_exhausted hold the key; rate_limit holds the
// key, or key+model when the limit is per model (the message names the model,
// a google.rpc QuotaFailure has a model dimension, or the provider is Azure,
// whose limits are per deployment, or Bedrock, whose on-demand quotas are per
// model, or Anthropic and the message names a per-minute limit ("input
// tokens per minute", "requests per minute", "per-minute rate limit": its
// RPM, ITPM and OTPM, set per model class); "your account's rate
// limit" stays on the key), and so does a spent per-day limit (quota_exhausted on key+model
// when the day's limit is the model's); model_not_accessible, model_retired
// and region_blocked hold key+model; transient, request_rejected and
// unrecognised hold nothing (transient feeds the circuit breaker instead).
//
// # Stated waits
//
// In order: retry-after-ms, Retry-After (seconds or HTTP date, relative to
// the clock given to ClassifyAt), google.rpc RetryInfo.retryDelay ("17s"),
// a hint in the message ("Please try again in 20s", "try again in 250ms",
// "Please retry in 6.17s", "retry after 45 seconds"), and for rate limits
// only x-ratelimit-reset-requests/-tokens ("6m0s"; the exhausted dimension,
// else the longer), anthropic-ratelimit-*-reset (RFC 3339) and OpenRouter's
// X-RateLimit-Reset (unix ms in error.metadata.headers). A spent per-day
// limit takes the same waits, but only one of a minute or more (the reset,
// or the refill of a request's worth: "try again in 9m38s"; a shorter hint is
// one request's refill, and Gemini's retryDelay is the per-minute one); a
// limit of 0 states no wait at all (it never resets by itself): both then
// wait on their class's ladder.
//
// # Operator rules (trip_on)
//
// A Rule maps a regex, tried case-insensitively on the error code, type,
// status text and message of every layer, to a class and an optional hold
// TTL. Classifier applies the first matching rule of a provider's set; a
// provider's set (PerProvider, by configured provider name) replaces the
// global one. CompileRule validates a rule and names it in every error. In
// the environment a global rule is three variables:
//
//	SWITCHYARD_TRIP_<NAME>_MATCH=quota.*exceeded for project
//	SWITCHYARD_TRIP_<NAME>_CLASS=quota_exhausted
//	SWITCHYARD_TRIP_<NAME>_TTL=6h
//
// RulesFromEnv reads them (the rule is named <name> in lower case).
//
// # Wire form and swctl classify
//
// DecodeWire reads the JSON form of an Input and Result.Wire gives the JSON
// form of a Result, so that `swctl classify` and an admin endpoint speak the
// same language. swctl classify reads JSON Lines on stdin:
//
//	{"provider": "openai", "status": 429, "headers": {"x-ratelimit-reset-tokens": "6m0s"},
//	 "body": {"error": {...}}, "stream": false, "error": ""}
//
// and prints one line per input:
//
//	{"class":"rate_limit","scope":"key+model","retry_after_ms":360000,"code":"rate_limit_exceeded","reason":"...","action":"rotate","holds":true,"soft":true}
//
// body may be a JSON value or a string (text, or JSON as text); status may
// be null for a transport error given in "error". DecodeWire is strict: an
// unknown field, a key named twice in one object, a top-level key in two
// spellings or anything after the object is an error. A line that cannot
// be read prints {"error":"line N: ..."} and the command exits 1 after the
// last line.
//
// # Corpus
//
// testdata/corpus holds real provider error bodies (213, from 26 provider
// types, one directory each), one JSON file per case with its public source,
// checked by TestCorpus; a provider the classifier does not know by type
// (Moonshot, DashScope, Zhipu, Cerebras, Fireworks, Volcengine, ...) is
// classified as a deployment would configure it, openai-compatible.
// `go test -run TestCorpus -update` rewrites the expected results, which
// must then be reviewed.
package failure
