package tokens

import (
	"strings"
	"testing"
)

// TestInlineImagesAreNotPromptText: an inline base64 image (a data URL, or
// Anthropic's base64 source) counts as one image's tokens, not a token per
// four bytes; text, however long, still counts a token per four bytes.
func TestInlineImagesAreNotPromptText(t *testing.T) {
	img := strings.Repeat("A", 600<<10)
	openai := `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,` + img + `"}}]}]}`
	anthropic := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"` + img + `"}}]}]}`
	for name, body := range map[string]string{"data URL": openai, "Anthropic source": anthropic} {
		if n := Estimate([]byte(body)); n < ImageTokens || n > ImageTokens+100 {
			t.Errorf("%s: %d tokens", name, n)
		}
	}
	text := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("word ", 120<<10) + `"}]}`
	if n := Estimate([]byte(text)); n < 150_000 {
		t.Errorf("600 KB of text: %d tokens", n)
	}
	// A data URL inside text counts as an image; the text around it as text.
	css := `{"model":"m","messages":[{"role":"user","content":"fix this css: .a{background:url(data:image/png;base64,` + img[:2000] + `)} ` + strings.Repeat(".b{color:red} ", 30<<10) + `"}]}`
	if n := Estimate([]byte(css)); n < 100_000 {
		t.Errorf("400 KB of CSS with a data URL: %d tokens", n)
	}
	// Spaced JSON, and Gemini's inline_data.
	for name, body := range map[string]string{
		"spaced Anthropic source": `{"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "` + img + `"}}]}]}`,
		"Gemini inline_data":      `{"contents":[{"parts":[{"inline_data":{"mime_type":"image/jpeg","data":"` + img + `"}}]}]}`,
		"wrapped base64":          `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,` + strings.Repeat(strings.Repeat("A", 76)+`\n`, 8000) + `"}}]}]}`,
	} {
		if n := Estimate([]byte(body)); n < ImageTokens || n > ImageTokens+100 {
			t.Errorf("%s: %d tokens", name, n)
		}
	}
}
