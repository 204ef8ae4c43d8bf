package proxy

import (
	"switchyard.dev/services/proxy/translate"
	"switchyard.dev/shared/provider"
)

// translateRequest converts a caller's chat body into the other format.
func translateRequest(callerFormat provider.Format, body []byte, upstreamModel string) ([]byte, error) {
	if callerFormat == provider.FormatOpenAI {
		return translate.ChatToMessages(body, upstreamModel)
	}
	return translate.MessagesToChat(body, upstreamModel)
}

// translateResponse converts a successful non-stream response into the
// caller's format (a no-op when the formats match).
func translateResponse(callerFormat, upstreamFormat provider.Format, op provider.Op, body []byte, model string) ([]byte, error) {
	if callerFormat == provider.FormatResponses && upstreamFormat != provider.FormatResponses {
		if upstreamFormat == provider.FormatAnthropic {
			chat, err := translate.MessagesResponseToChat(body, model)
			if err != nil {
				return nil, err
			}
			body = chat
		}
		return chatToResponse(body, model)
	}
	if callerFormat == upstreamFormat || op != provider.OpChat {
		return body, nil
	}
	if callerFormat == provider.FormatOpenAI {
		return translate.MessagesResponseToChat(body, model)
	}
	return translate.ChatResponseToMessages(body, model)
}

// errorShape is the shape of a format's error bodies: the Responses API's
// are OpenAI's ({"error":{"message","type","param","code"}}).
func errorShape(f provider.Format) provider.Format {
	if f == provider.FormatAnthropic {
		return provider.FormatAnthropic
	}
	return provider.FormatOpenAI
}

// translateError converts an upstream error body of the other shape into
// the caller's (errorShape).
func translateError(callerFormat provider.Format, status int, body []byte) []byte {
	if errorShape(callerFormat) == provider.FormatOpenAI {
		return translate.AnthropicErrorToOpenAI(status, body)
	}
	return translate.OpenAIErrorToAnthropic(status, body)
}

// newStreamConverter converts an upstream stream of the other format into
// the caller's.
func newStreamConverter(callerFormat, upstreamFormat provider.Format, model string) translate.StreamConverter {
	if callerFormat == provider.FormatResponses {
		if upstreamFormat == provider.FormatAnthropic {
			return &chained{first: translate.NewMessagesToChatStream(model), second: newChatToResponsesStream(model)}
		}
		return newChatToResponsesStream(model)
	}
	if callerFormat == provider.FormatOpenAI {
		return translate.NewMessagesToChatStream(model)
	}
	return translate.NewChatToMessagesStream(model)
}
