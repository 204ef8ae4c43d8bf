package translate

import "switchyard.dev/shared/provider"

// Whole bodies between the wire formats of shared/provider, as the proxy
// asks for them.

// Request converts a caller's chat body into the other chat format:
// OpenAI chat into Anthropic messages, or back.
func Request(callerFormat provider.Format, body []byte, upstreamModel string) ([]byte, error) {
	if callerFormat == provider.FormatOpenAI {
		return ChatToMessages(body, upstreamModel)
	}
	return MessagesToChat(body, upstreamModel)
}

// Answer converts a successful non-stream answer in the upstream's
// format into the caller's: chat and messages into each other, either
// into a Responses answer; the body itself when the formats match or the
// operation is not chat.
func Answer(callerFormat, upstreamFormat provider.Format, op provider.Op, body []byte, model string) ([]byte, error) {
	if callerFormat == provider.FormatResponses && upstreamFormat != provider.FormatResponses {
		if upstreamFormat == provider.FormatAnthropic {
			chat, err := MessagesResponseToChat(body, model)
			if err != nil {
				return nil, err
			}
			body = chat
		}
		return ChatToResponse(body, model)
	}
	if callerFormat == upstreamFormat || op != provider.OpChat {
		return body, nil
	}
	if callerFormat == provider.FormatOpenAI {
		return MessagesResponseToChat(body, model)
	}
	return ChatResponseToMessages(body, model)
}
