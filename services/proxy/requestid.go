package proxy

// Request ids (the caller's X-Request-Id or a generated one, and
// Anthropic's request-id) and the caller's Idempotency-Key.

import (
	"math/rand/v2"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/shared/provider"
)

// setRequestID sets the response's X-Request-Id: the caller's own when it
// is visible ASCII of at most 128 bytes, else a new one (newRequestID);
// and request-id, the same, when the caller speaks Anthropic's format
// (f, from Service.formatOf).
func setRequestID(c *fiber.Ctx, f provider.Format) {
	h := &c.Response().Header
	if given := c.Request().Header.Peek(headerRequestID); len(given) <= 128 && visibleASCII(given) {
		h.SetCanonical(hdrRequestID, given) // a copy
	} else {
		var b [requestIDLen]byte
		h.SetCanonical(hdrRequestID, newRequestID(&b))
	}
	if f == provider.FormatAnthropic {
		setAnthropicRequestID(c)
	}
}

// setAnthropicRequestID sets request-id to the response's X-Request-Id:
// Anthropic's API names its request id so, and its SDKs read it from there
// (anthropic-sdk-go's Error.RequestID). Set on answers in Anthropic's
// format (formatOf, an Anthropic endpoint, a passthrough to an Anthropic
// provider).
func setAnthropicRequestID(c *fiber.Ctx) {
	h := &c.Response().Header
	h.SetCanonical(hdrAnthropicRequestID, h.Peek(headerRequestID)) // copied into its own value
}

// hdrAnthropicRequestID is X-Request-Id again, on answers in Anthropic's
// format, whose API and SDKs name the request id so.
var hdrAnthropicRequestID = []byte("Request-Id")

// requestIDLen is the length of a generated request id.
const requestIDLen = 4 + 24

// newRequestID writes a new request id into b: req_ and 96 bits from the
// runtime's ChaCha8 generator (seeded from the OS, no system call): unique,
// and hard to guess (though not a secret: ids are no credential anywhere).
func newRequestID(b *[requestIDLen]byte) []byte {
	copy(b[:], "req_")
	hexOf(b[4:16], rand.Uint64()>>16)
	hexOf(b[16:], rand.Uint64()>>16)
	return b[:]
}

// hexOf writes the low 4*len(dst) bits of v into dst as lowercase hex.
func hexOf(dst []byte, v uint64) {
	const digits = "0123456789abcdef"
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = digits[v&0xf]
		v >>= 4
	}
}

func visibleASCII[T string | []byte](s T) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return len(s) > 0
}
