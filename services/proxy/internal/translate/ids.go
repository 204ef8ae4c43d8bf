package translate

import (
	"crypto/rand"
	"strings"
	"time"
)

// now and newIDSuffix are replaced by tests for deterministic output.
var (
	now         = time.Now
	newIDSuffix = randomIDSuffix
)

const (
	chatIDPrefix    = "chatcmpl-"
	messageIDPrefix = "msg_"
	// toolUseIDPrefix starts the id generated for a tool call that came
	// without one.
	toolUseIDPrefix = "toolu_"
)

const idAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// randomIDSuffix returns 24 random alphanumeric characters.
func randomIDSuffix() string {
	var b [24]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return string(b[:])
}

// chatIDFromMessageID maps an Anthropic message id to a chat completion id:
// "msg_01X" -> "chatcmpl-msg_01X". An empty id gets a generated one.
func chatIDFromMessageID(id string) string {
	if id == "" {
		return chatIDPrefix + newIDSuffix()
	}
	return chatIDPrefix + id
}

// messageIDFromChatID maps a chat completion id to an Anthropic message id:
// "chatcmpl-abc" -> "msg_chatcmpl-abc", and "chatcmpl-msg_01X" back to
// "msg_01X". An empty id gets a generated one.
func messageIDFromChatID(id string) string {
	if id == "" {
		return messageIDPrefix + newIDSuffix()
	}
	if strings.HasPrefix(id, chatIDPrefix+messageIDPrefix) {
		return id[len(chatIDPrefix):]
	}
	return messageIDPrefix + id
}
