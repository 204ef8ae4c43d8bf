package guard

import (
	"bytes"

	"switchyard.dev/shared/jsonfield"
)

// Shape is what a request offers beside its text: how many messages, its
// attachments (images, documents, files) by count and the largest one's
// size, and the tools it offers.
type Shape struct {
	Messages    int
	Attachments int
	// LargestAttachment is the bytes of the largest inline attachment (its
	// base64 or data URL as sent); a URL the provider fetches counts 0.
	LargestAttachment int
	// body and f: to list the tools (Tools).
	body []byte
	f    Format
}

// attachmentTypes are the part and block types that attach a file.
var attachmentTypes = [][]byte{
	[]byte(`"image_url"`), []byte(`"input_image"`), []byte(`"input_file"`), []byte(`"file"`),
	[]byte(`"image"`), []byte(`"document"`), []byte(`"input_audio"`),
}

// ShapeOf reads the shape of body (format f).
func ShapeOf(body []byte, f Format) Shape {
	sh := Shape{body: body, f: f}
	part := func(p []byte) {
		typ := jsonfield.Lookup(p, "type")[0]
		for _, t := range attachmentTypes {
			if bytes.Equal(typ, t) {
				sh.Attachments++
				sh.LargestAttachment = max(sh.LargestAttachment, inlineBytes(p))
				return
			}
		}
	}
	msgs := func(list []byte) {
		jsonfield.Each(list, func(m []byte) {
			sh.Messages++
			jsonfield.Each(jsonfield.Lookup(m, "content")[0], part)
		})
	}
	switch f {
	case Chat, Messages:
		msgs(jsonfield.Lookup(body, "messages")[0])
	case Responses:
		in := jsonfield.Lookup(body, "input")[0]
		if !jsonfield.Each(in, func(item []byte) {
			sh.Messages++
			jsonfield.Each(jsonfield.Lookup(item, "content")[0], part)
		}) && len(in) > 0 {
			sh.Messages = 1
		}
	}
	return sh
}

// inlineBytes is the size of the data a part carries inline: base64 data
// (data, file_data, Anthropic's source.data) or a data URL (url,
// image_url), at any depth of the part; a URL the provider fetches counts 0.
func inlineBytes(p []byte) int {
	n := 0
	jsonfield.Fields(p, func(k, v []byte) bool {
		switch {
		case len(v) > 0 && v[0] == '{':
			n = max(n, inlineBytes(v))
		case len(v) < 2 || v[0] != '"':
		case string(k) == "data" || string(k) == "file_data":
			n = max(n, len(v)-2)
		case (string(k) == "url" || string(k) == "image_url") && bytes.HasPrefix(v, []byte(`"data:`)):
			n = max(n, len(v)-2)
		}
		return true
	})
	return n
}

// Tools calls fn with the name of each tool the request offers (a
// function's name; a built-in tool's type, web_search say).
func (sh *Shape) Tools(fn func(name []byte)) {
	jsonfield.Each(jsonfield.Lookup(sh.body, "tools")[0], func(t []byte) {
		v := jsonfield.Lookup(t, "function", "name", "type")
		switch {
		case v[0] != nil: // OpenAI chat: {"type":"function","function":{"name":...}}
			fn(unquoted(jsonfield.Lookup(v[0], "name")[0]))
		case v[1] != nil: // Anthropic, Responses function tools
			fn(unquoted(v[1]))
		default:
			fn(unquoted(v[2]))
		}
	})
}

// Sets reports whether the request sets the top-level parameter name.
func (sh *Shape) Sets(name string) bool { return jsonfield.Lookup(sh.body, name)[0] != nil }

// unquoted is a raw JSON string's contents, escapes unresolved (tool names
// are identifiers).
func unquoted(v []byte) []byte {
	if len(v) >= 2 && v[0] == '"' {
		return v[1 : len(v)-1]
	}
	return nil
}
