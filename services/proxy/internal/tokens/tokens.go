// Package tokens estimates a request's prompt tokens from its body before
// any provider has counted them: for plan admission, routing by context
// window and headroom, and a usage record's estimate.
package tokens

import "bytes"

// ImageTokens is what one inline image is taken to cost in prompt tokens
// (a large image at Anthropic's rate; OpenAI's high detail costs less).
const ImageTokens = 1600

var (
	dataURLMark = []byte(";base64,") // data:image/png;base64,...
	// dataKey is the key of base64 inside an object: Anthropic's base64
	// source ({"type":"base64","media_type":...,"data":"..."}), Gemini's
	// inline_data, OpenAI's input_audio.
	dataKey = []byte(`"data"`)
)

// minInline is the shortest base64 run counted as inline content rather
// than text (text has spaces: its runs are short).
const minInline = 1024

// Estimate estimates a request's prompt tokens from its body:
// about four bytes a token, except inline base64 content (an image, a
// PDF, audio: a data URL, or a "data" value) of at least minInline bytes,
// which costs ImageTokens each whatever its size: a 450 KB photo is not
// 110,000 tokens. Two scans of the body find where to look.
func Estimate(body []byte) int64 {
	n, inline := len(body), 0
	// skip discounts the base64 run at the start of rest and returns what
	// follows it.
	skip := func(rest []byte) []byte {
		end := base64Run(rest)
		if end >= minInline {
			n -= end
			inline++
		}
		return rest[end:]
	}
	for rest := body; ; {
		i := bytes.Index(rest, dataURLMark)
		if i < 0 {
			break
		}
		rest = skip(rest[i+len(dataURLMark):])
	}
	for rest := body; ; {
		i := bytes.Index(rest, dataKey)
		if i < 0 {
			break
		}
		rest = rest[i+len(dataKey):]
		j := 0 // past the colon and the value's opening quote, spaces allowed
		for j < len(rest) && (rest[j] == ' ' || rest[j] == ':' || rest[j] == '\t' || rest[j] == '\n' || rest[j] == '\r') {
			j++
		}
		if j == 0 || j >= len(rest) || rest[j] != '"' {
			continue
		}
		rest = skip(rest[j+1:])
	}
	return int64(max(n, 0)/4 + inline*ImageTokens)
}

// base64Run is the length of the run of base64 at the start of b: the
// alphabet, and the escapes JSON writes in it ("\/", and "\n" or "\r"
// where an encoder wrapped its lines).
func base64Run(b []byte) int {
	i := 0
	for i < len(b) {
		c := b[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '+', c == '/', c == '=':
			i++
		case c == '\\' && i+1 < len(b) && (b[i+1] == '/' || b[i+1] == 'n' || b[i+1] == 'r'):
			i += 2
		default:
			return i
		}
	}
	return i
}
