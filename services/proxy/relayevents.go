package proxy

// One upstream event of a relayed stream made into the caller's frames:
// usage noted, translated when the formats differ, and error events masked.

import (
	"bytes"
	"net/http"

	"switchyard.dev/services/proxy/internal/gwerror"
	"switchyard.dev/services/proxy/internal/translate"
	"switchyard.dev/shared/provider"
	"switchyard.dev/shared/redact"
	"switchyard.dev/shared/sse"
)

// convertKind turns one upstream event of the given kind into the
// caller's frames and notes terminal and error events.
func (rl *relay) convertKind(ev sse.Event, kind provider.EventKind) []byte {
	if got, only := provider.EventUsage(rl.upFormat, ev.Name, ev.Data, &rl.r.use.tokens); got {
		rl.r.use.tokensOK = true
		if only && rl.dropUsage {
			return nil
		}
	}
	if kind == provider.EventError {
		rl.upErr = true
	}
	if rl.conv == nil {
		rl.passed++
		if kind == provider.EventTerminal {
			rl.done = true
		}
		if kind == provider.EventError {
			return rl.masked(ev.Raw)
		}
		return ev.Raw
	}
	data := ev.Data
	if kind == provider.EventError {
		// masked before it is translated: a translation may cut a long
		// message, and a secret cut in two is no longer recognisable
		data = redact.Body(data, providerSecrets(rl.t.step.Provider)...)
	}
	frames, done, err := rl.conv.Event(ev.Name, data)
	if err != nil && kind != provider.EventError {
		rl.convErr = err
		return nil
	}
	if err != nil {
		frames = nil // the error event's own text did not translate: one of ours below
	}
	if done {
		rl.done = true
	}
	if kind == provider.EventError {
		if len(frames) == 0 {
			// The upstream's error did not translate (not JSON, an unknown
			// shape): the caller still gets one error event, in its format.
			return streamErrorEvent(rl.r.ep.format, http.StatusBadGateway, gwerror.ProviderError,
				"the upstream reported an error in the stream", rl.nextSequence())
		}
		return rl.masked(frames)
	}
	return frames
}

// nextSequence is the sequence_number the next event of a Responses API
// stream takes: the converter's count, or the upstream's own events
// relayed as they came (numbered from 0).
func (rl *relay) nextSequence() int {
	if s, ok := rl.conv.(translate.Sequencer); ok {
		return s.NextSequence()
	}
	return rl.passed
}

// masked masks an error event's frames: providers echo keys in messages.
// Each data line holds JSON, masked inside its strings.
func (rl *relay) masked(frames []byte) []byte {
	secrets := providerSecrets(rl.t.step.Provider)
	lines := bytes.SplitAfter(frames, []byte("\n"))
	out := make([]byte, 0, len(frames))
	for _, l := range lines {
		if rest, ok := bytes.CutPrefix(l, []byte("data:")); ok {
			payload := bytes.TrimRight(rest, "\r\n")
			out = append(out, "data:"...)
			out = append(out, redact.Body(payload, secrets...)...)
			out = append(out, rest[len(payload):]...)
			continue
		}
		out = append(out, redact.Text(l, secrets...)...)
	}
	return out
}
