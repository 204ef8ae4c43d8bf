package failure

// Classify decides what a failed attempt says about its target.
//
// This first version decides from the status code and transport error only;
// the provider-signal-first classifier replaces it (issue 3).
func Classify(in Input) Result {
	switch {
	case in.Err != nil || in.Status == 0:
		return Result{Class: Transient, Reason: "transport error"}
	case in.Status == 429:
		return Result{Class: RateLimit, Scope: ScopeKey, Reason: "rate limited"}
	case in.Status == 401:
		return Result{Class: CredentialRejected, Scope: ScopeKey, Reason: "credential rejected"}
	case in.Status == 402:
		return Result{Class: QuotaExhausted, Scope: ScopeKey, Reason: "payment required"}
	case in.Status == 403:
		return Result{Class: ModelNotAccessible, Scope: ScopeKeyModel, Reason: "forbidden"}
	case in.Status == 404:
		return Result{Class: ModelNotAccessible, Scope: ScopeKeyModel, Reason: "not found"}
	case in.Status >= 500:
		return Result{Class: Transient, Reason: "server error"}
	case in.Status >= 400:
		return Result{Class: RequestRejected, Reason: "request rejected"}
	}
	return Result{Class: Unrecognised}
}
