package translate

import (
	"encoding/json"
	"testing"
)

// TestRequestRoundTrip translates an Anthropic request to OpenAI and back:
// what both formats can say must come back unchanged.
func TestRequestRoundTrip(t *testing.T) {
	in := `{"model":"m","system":"Be brief.","messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"},{"role":"user","content":"Bye <3"}],"max_tokens":77,"temperature":0.5,"top_p":0.8,"stop_sequences":["X","Y"],"stream":true,"metadata":{"user_id":"u1"}}`
	chat, err := MessagesToChat([]byte(in), "gpt")
	if err != nil {
		t.Fatal(err)
	}
	back, err := ChatToMessages(chat, "m")
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	if err := json.Unmarshal([]byte(in), &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(back, &got); err != nil {
		t.Fatal(err)
	}
	wantJSON, _ := json.Marshal(want)
	gotJSON, _ := json.Marshal(got)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("round trip\n got %s\nwant %s", gotJSON, wantJSON)
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
