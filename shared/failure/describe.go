package failure

// Describe reads what a provider's error body says of itself: its code,
// its type and its message, from the first layer that has them (an
// OpenRouter error's own, else the upstream's it carries). The message is
// the provider's text, unmasked: mask it before it goes anywhere.
func Describe(body []byte) (code, typ, message string) {
	for _, l := range decodeSignal(body, 0).layers() {
		if code == "" {
			code = firstNonEmpty(l.code, l.inner, l.exception, l.statusText)
		}
		if typ == "" {
			typ = l.typ
		}
		if message == "" {
			message = l.message
		}
	}
	return code, typ, message
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
