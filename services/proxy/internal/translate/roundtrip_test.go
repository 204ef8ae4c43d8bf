package translate

import (
	"encoding/json"
	"os"
	"testing"
)

// TestRequestRoundTrip translates requests to the other format and back:
// what both formats can say must come back unchanged (want, when set, is
// what the trip drops).
func TestRequestRoundTrip(t *testing.T) {
	toChat := func(b []byte) ([]byte, error) { return MessagesToChat(b, "gpt") }
	toMessages := func(b []byte) ([]byte, error) { return ChatToMessages(b, "claude") }
	backToChat := func(b []byte) ([]byte, error) { return MessagesToChat(b, "m") }
	backToMessages := func(b []byte) ([]byte, error) { return ChatToMessages(b, "m") }
	tests := []struct {
		name        string
		there, back func([]byte) ([]byte, error)
		in, want    string
	}{
		// Text, sampling parameters, stop sequences, stream and user.
		{name: "messages text", there: toChat, back: backToMessages,
			in: `{"model":"m","system":"Be brief.","messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"},{"role":"user","content":"Bye <3"}],"max_tokens":77,"temperature":0.5,"top_p":0.8,"stop_sequences":["X","Y"],"stream":true,"metadata":{"user_id":"u1"}}`},
		// Images and PDFs of an OpenAI request, but for the image detail
		// (dropped).
		{name: "chat media", there: toMessages, back: backToChat,
			in:   `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"Compare"},{"type":"image_url","image_url":{"url":"https://example.com/a.jpg","detail":"low"}},{"type":"image_url","image_url":{"url":"data:image/webp;base64,UklGRg=="}},{"type":"file","file":{"file_data":"data:application/pdf;base64,JVBERi0xLjQK","filename":"a.pdf"}}]},{"role":"assistant","content":"Done"}],"max_tokens":50}`,
			want: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"Compare"},{"type":"image_url","image_url":{"url":"https://example.com/a.jpg"}},{"type":"image_url","image_url":{"url":"data:image/webp;base64,UklGRg=="}},{"type":"file","file":{"file_data":"data:application/pdf;base64,JVBERi0xLjQK","filename":"a.pdf"}}]},{"role":"assistant","content":"Done"}],"max_tokens":50}`},
		// And an Anthropic request's through OpenAI.
		{name: "messages media", there: toChat, back: backToMessages,
			in: `{"model":"m","max_tokens":50,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/gif","data":"R0lGODlh"}},{"type":"image","source":{"type":"url","url":"https://example.com/b.png"}},{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0xLjQK"},"title":"b.pdf"},{"type":"text","text":"Which?"}]}]}`},
		// web_search_options with a location, through Anthropic's web
		// search tool, but for search_context_size (dropped).
		{name: "chat web search", there: toMessages, back: backToChat,
			in:   `{"model":"m","messages":[{"role":"user","content":"News?"}],"max_tokens":100,"web_search_options":{"search_context_size":"low","user_location":{"type":"approximate","approximate":{"city":"Paris","country":"FR","timezone":"Europe/Paris"}}}}`,
			want: `{"model":"m","messages":[{"role":"user","content":"News?"}],"max_tokens":100,"web_search_options":{"user_location":{"type":"approximate","approximate":{"city":"Paris","country":"FR","timezone":"Europe/Paris"}}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mid, err := tt.there([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			back, err := tt.back(mid)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			if want == "" {
				want = tt.in
			}
			roundTripJSON(t, back, []byte(want))
		})
	}
}

// TestResponseRoundTrip translates an Anthropic message to a chat completion
// and back.
func TestResponseRoundTrip(t *testing.T) {
	in := `{"id":"msg_01A","type":"message","role":"assistant","model":"caller","content":[{"type":"text","text":"Hi there"}],"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":5,"output_tokens":3}}`
	chat, err := MessagesResponseToChat([]byte(in), "caller")
	if err != nil {
		t.Fatal(err)
	}
	back, err := ChatResponseToMessages(chat, "caller")
	if err != nil {
		t.Fatal(err)
	}
	if string(back) != in {
		t.Errorf("round trip\n got %s\nwant %s", back, in)
	}
}

// roundTripJSON compares two JSON documents as values.
func roundTripJSON(t *testing.T, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("want is not JSON: %v\n%s", err, want)
	}
	gj, _ := json.Marshal(g)
	wj, _ := json.Marshal(w)
	if string(gj) != string(wj) {
		t.Errorf("round trip\n got %s\nwant %s", gj, wj)
	}
}

// TestThinkingResponseRoundTrip: thinking, redacted thinking, text and a
// tool call of an Anthropic message come back unchanged through a chat
// completion (thinking_blocks carries the signatures).
func TestThinkingResponseRoundTrip(t *testing.T) {
	in, err := os.ReadFile("testdata/messages_response_to_chat/thinking_redacted_tool_use.json")
	if err != nil {
		t.Fatal(err)
	}
	chat, err := MessagesResponseToChat(in, "claude-sonnet-4-5-20250929")
	if err != nil {
		t.Fatal(err)
	}
	back, err := ChatResponseToMessages(chat, "claude-sonnet-4-5-20250929")
	if err != nil {
		t.Fatal(err)
	}
	roundTripJSON(t, back, in)
}
