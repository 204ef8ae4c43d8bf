package adminapi

// ErrorAnswer is the body of every error answer: {"error":{...}}.
type ErrorAnswer struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is an error answer's content. Codes are a closed list, documented
// in the service's README and openapi.json.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Errors are the configuration loader's messages (invalid_config).
	Errors []string `json:"errors,omitempty"`
}
