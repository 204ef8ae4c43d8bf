package fakeprovider

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
)

// OpenAI audio: text to speech (POST /v1/audio/speech) and speech to text
// (POST /v1/audio/transcriptions).

// speechContentTypes maps "response_format" to the Content-Type OpenAI
// answers with.
var speechContentTypes = map[string]string{
	"mp3":  "audio/mpeg",
	"opus": "audio/opus",
	"aac":  "audio/aac",
	"flac": "audio/flac",
	"wav":  "audio/wav",
	"pcm":  "audio/pcm",
}

// mp3FrameLen is the length of one MPEG-1 Layer III frame at 128 kbit/s,
// 44.1 kHz, unpadded.
const mp3FrameLen = 417

// fakeAudio returns frames frames of silence in format: an ID3v2 tag and
// MPEG frames for mp3, a RIFF/WAVE header and 16-bit PCM for wav, raw PCM
// for pcm, the format's magic bytes and zeros for the others. Unknown
// formats are mp3.
func fakeAudio(format string, frames int) []byte {
	size := frames * mp3FrameLen
	var b bytes.Buffer
	switch format {
	case "wav":
		// 24 kHz, mono, 16-bit, as OpenAI's wav.
		b.WriteString("RIFF")
		_ = binary.Write(&b, binary.LittleEndian, uint32(36+size))
		b.WriteString("WAVEfmt ")
		_ = binary.Write(&b, binary.LittleEndian, []any{uint32(16), uint16(1), uint16(1), uint32(24000), uint32(48000), uint16(2), uint16(16)})
		b.WriteString("data")
		_ = binary.Write(&b, binary.LittleEndian, uint32(size))
		b.Write(make([]byte, size))
	case "pcm":
		b.Write(make([]byte, size))
	case "opus":
		b.WriteString("OggS")
		b.Write(make([]byte, size-4))
	case "aac":
		b.Write([]byte{0xff, 0xf1}) // ADTS sync word, MPEG-4, no CRC
		b.Write(make([]byte, size-2))
	case "flac":
		b.WriteString("fLaC")
		b.Write(make([]byte, size-4))
	default:
		b.Write([]byte{'I', 'D', '3', 4, 0, 0, 0, 0, 0, 0}) // ID3v2.4, no flags, empty
		frame := make([]byte, mp3FrameLen)
		copy(frame, []byte{0xff, 0xfb, 0x90, 0x64}) // MPEG-1 Layer III, 128 kbit/s, 44.1 kHz
		for range frames {
			b.Write(frame)
		}
	}
	return b.Bytes()
}

// speechStream sends the audio in chunks pieces, flushing each, with the
// chunk delay between them; a rule's CutAfter truncates it.
type speechStream struct {
	s           *Server
	w           http.ResponseWriter
	req         *request
	rc          *http.ResponseController
	contentType string
	pieces      [][]byte
}

func (s *Server) newSpeechStream(w http.ResponseWriter, req *request, chunks int) *speechStream {
	format := req.body.responseFormat()
	ct, ok := speechContentTypes[format]
	if !ok {
		format, ct = "mp3", speechContentTypes["mp3"]
	}
	audio := fakeAudio(format, 2*chunks)
	pieces := make([][]byte, chunks)
	for i := range pieces {
		pieces[i] = audio[i*len(audio)/chunks : (i+1)*len(audio)/chunks]
	}
	return &speechStream{s: s, w: w, req: req, contentType: ct, pieces: pieces}
}

func (sp *speechStream) start() error {
	sp.s.setHeaders(sp.w.Header(), sp.req)
	sp.w.Header().Set("Content-Type", sp.contentType)
	sp.w.WriteHeader(http.StatusOK)
	sp.rc = http.NewResponseController(sp.w)
	return sp.rc.Flush()
}

func (sp *speechStream) content(i int, _ string) error {
	if _, err := sp.w.Write(sp.pieces[i]); err != nil {
		return err
	}
	return sp.rc.Flush()
}

func (sp *speechStream) fail([]byte) error { return nil }

func (sp *speechStream) finish() error { return nil }

// errNoFile is a transcription upload without its "file" part.
var errNoFile = errors.New(`multipart body without a "file" part`)

// parseMultipart reads a multipart/form-data body: its text fields, and the
// size of its "file" part.
func parseMultipart(contentType string, body []byte) (map[string]string, int64, error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return nil, 0, fmt.Errorf("content type %q is not multipart/form-data", contentType)
	}
	form := make(map[string]string)
	var fileSize int64 = -1
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return form, 0, fmt.Errorf("read multipart body: %w", err)
		}
		if p.FormName() == "file" {
			if fileSize, err = io.Copy(io.Discard, p); err != nil {
				return form, 0, fmt.Errorf("read file part: %w", err)
			}
			continue
		}
		v, err := io.ReadAll(io.LimitReader(p, 1<<20))
		if err != nil {
			return form, 0, fmt.Errorf("read part %q: %w", p.FormName(), err)
		}
		form[p.FormName()] = string(v)
	}
	if fileSize < 0 {
		return form, 0, errNoFile
	}
	return form, fileSize, nil
}

// audioSeconds is the duration the fake assigns to an upload: 16 000 bytes
// a second (128 kbit/s), at least one.
func audioSeconds(fileSize int64) float64 {
	return max(1, float64(fileSize/16000))
}

type transcriptionTokenUsage struct {
	Type              string `json:"type"`
	InputTokens       int    `json:"input_tokens"`
	InputTokenDetails struct {
		TextTokens  int `json:"text_tokens"`
		AudioTokens int `json:"audio_tokens"`
	} `json:"input_token_details"`
	OutputTokens int `json:"output_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

type transcriptionDurationUsage struct {
	Type    string  `json:"type"`
	Seconds float64 `json:"seconds"`
}

// transcriptionUsage is whisper's duration usage, or the token usage of
// the gpt-4o transcribe models.
func transcriptionUsage(req *request, outputTokens int) any {
	secs := audioSeconds(req.call.FileSize)
	if strings.HasPrefix(req.call.Model, "whisper") {
		return transcriptionDurationUsage{Type: "duration", Seconds: secs}
	}
	u := transcriptionTokenUsage{Type: "tokens", InputTokens: int(secs) * 10, OutputTokens: outputTokens}
	u.InputTokenDetails.AudioTokens = u.InputTokens
	u.TotalTokens = u.InputTokens + u.OutputTokens
	return u
}

type transcriptionSegment struct {
	ID               int     `json:"id"`
	Seek             int     `json:"seek"`
	Start            float64 `json:"start"`
	End              float64 `json:"end"`
	Text             string  `json:"text"`
	Tokens           []int   `json:"tokens"`
	Temperature      float64 `json:"temperature"`
	AvgLogprob       float64 `json:"avg_logprob"`
	CompressionRatio float64 `json:"compression_ratio"`
	NoSpeechProb     float64 `json:"no_speech_prob"`
}

// serveTranscription answers in "response_format": json (default), text,
// srt, vtt or verbose_json; "stream": "true" (gpt-4o transcribe models)
// gets transcript.text.delta events and a transcript.text.done.
func (s *Server) serveTranscription(w http.ResponseWriter, req *request, chunks int) {
	text := req.answerText(chunks)
	secs := audioSeconds(req.call.FileSize)
	switch req.form["response_format"] {
	case "text":
		s.writeBody(w, req, http.StatusOK, "text/plain; charset=utf-8", []byte(text+"\n"))
	case "srt":
		s.writeBody(w, req, http.StatusOK, "text/plain; charset=utf-8",
			fmt.Appendf(nil, "1\n00:00:00,000 --> %s\n%s\n\n", srtTime(secs, ","), text))
	case "vtt":
		s.writeBody(w, req, http.StatusOK, "text/plain; charset=utf-8",
			fmt.Appendf(nil, "WEBVTT\n\n00:00:00.000 --> %s\n%s\n\n", srtTime(secs, "."), text))
	case "verbose_json":
		s.writeJSON(w, req, map[string]any{
			"task": "transcribe", "language": "english", "duration": secs, "text": text,
			"segments": []transcriptionSegment{{
				End: secs, Text: text, Tokens: []int{}, AvgLogprob: -0.2, CompressionRatio: 1, NoSpeechProb: 0.01,
			}},
			"usage": transcriptionDurationUsage{Type: "duration", Seconds: secs},
		})
	default:
		s.writeJSON(w, req, map[string]any{"text": text, "usage": transcriptionUsage(req, 2*chunks)})
	}
}

func srtTime(secs float64, sep string) string {
	ms := int(secs * 1000)
	return fmt.Sprintf("%02d:%02d:%02d%s%03d", ms/3600000, ms/60000%60, ms/1000%60, sep, ms%1000)
}

// transcriptionStream writes a streamed transcription: one
// transcript.text.delta per chunk, then transcript.text.done with the
// whole text and the usage.
type transcriptionStream struct {
	s        *Server
	w        http.ResponseWriter
	req      *request
	sse      *sseWriter
	text     strings.Builder
	nContent int
}

func (s *Server) newTranscriptionStream(w http.ResponseWriter, req *request) *transcriptionStream {
	return &transcriptionStream{s: s, w: w, req: req}
}

func (t *transcriptionStream) start() error {
	t.sse = t.s.startSSE(t.w, t.req)
	return nil
}

func (t *transcriptionStream) content(_ int, text string) error {
	t.nContent++
	t.text.WriteString(text)
	return t.sse.json("", map[string]any{"type": "transcript.text.delta", "delta": text, "logprobs": []any{}})
}

func (t *transcriptionStream) fail(body []byte) error {
	return t.sse.event("", streamBody(body))
}

func (t *transcriptionStream) finish() error {
	return t.sse.json("", map[string]any{
		"type": "transcript.text.done", "text": t.text.String(), "logprobs": []any{},
		"usage": transcriptionUsage(t.req, 2*t.nContent),
	})
}
