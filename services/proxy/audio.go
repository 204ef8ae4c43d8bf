package proxy

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
	"time"

	"switchyard.dev/services/proxy/internal/gwerror"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"switchyard.dev/services/proxy/internal/upstream"
)

// Audio: POST /v1/audio/speech takes JSON and answers binary audio, relayed
// to the caller as it arrives (binaryRelay); POST /v1/audio/transcriptions
// takes multipart/form-data (the audio file, model, options) and answers
// JSON or text. Both go through the chat pipeline; only their bodies differ.

// parseForm reads what routing needs from a multipart request: its model.
// The form must name exactly one model (two would let the gateway
// authorise one and the upstream read the other) and carry a file.
func parseForm(body []byte, contentType string) (model string, berr *bodyError) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return "", &bodyError{gwerror.InvalidRequest, "the request must be multipart/form-data with a file and a model"}
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	models, files := 0, 0
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", &bodyError{gwerror.InvalidRequest, "the multipart body is malformed: " + err.Error()}
		}
		switch {
		case p.FormName() == "model":
			v, err := io.ReadAll(io.LimitReader(p, 1024))
			if err != nil {
				return "", &bodyError{gwerror.InvalidRequest, "the multipart body is malformed: " + err.Error()}
			}
			model = strings.TrimSpace(string(v))
			models++
		case p.FormName() == "file":
			files++
		}
	}
	switch {
	case models > 1:
		return "", &bodyError{gwerror.DuplicateKey, "the form names `model` more than once"}
	case model == "":
		return "", &bodyError{gwerror.MissingModel, "the form must name a model"}
	case files != 1:
		return "", &bodyError{gwerror.InvalidRequest, "the form must carry exactly one `file`"}
	}
	if berr := checkModelName(model); berr != nil {
		return "", berr
	}
	return model, nil
}

// formWithModel is the multipart body with its model field's value
// replaced (the upstream's name for the model), the other parts copied.
func formWithModel(body []byte, contentType, model string) ([]byte, error) {
	_, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	mw := multipart.NewWriter(&out)
	if err := mw.SetBoundary(params["boundary"]); err != nil {
		return nil, err
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		w, err := mw.CreatePart(p.Header)
		if err != nil {
			return nil, err
		}
		if p.FormName() == "model" {
			_, err = io.WriteString(w, model)
		} else {
			_, err = io.Copy(w, p)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := mw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// binaryRelay streams a binary answer (speech) to the caller as the
// upstream sends it, each read bounded by the stream idle timeout. It is
// the response's body stream, read by the server in the connection's
// goroutine (each read one chunk, flushed); Close ends the request.
type binaryRelay struct {
	r      *request
	t      target
	resp   *fasthttp.Response
	idle   idleArm
	wr     writeArm // the server writes what each Read returns: bounded as a relay's writes
	body   io.Reader
	first  []byte // the audio read by the attempt, relayed first
	eof    bool   // the attempt's read reached the end: nothing more to read
	atEOF  bool   // the upstream body was read to its end
	cut    bool   // a read failed: the next one reports it
	closed bool
}

// startAudio reads the first bytes of a 200 audio answer within the
// attempt's deadline: an upstream that fails or sends nothing before its
// first byte is a failed attempt (nothing has reached the caller, so
// another target can serve); otherwise the answer is committed to the
// caller and relayed as it arrives.
func (r *request) startAudio(t target, resp *fasthttp.Response, up *upstream.Client) attemptResult {
	body := resp.BodyStream()
	first := make([]byte, 32<<10)
	n, err := io.ReadAtLeast(body, first, 1)
	if n == 0 {
		upstream.CloseBodyStream(resp, false)
		fasthttp.ReleaseResponse(resp)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = errors.New("audio answer ended before its first byte")
		}
		return r.fail(t, &attemptError{err: upstream.TransportError(err, up.AttemptTimeout(), false)})
	}
	r.boundRelay(up) // speech as streams: the provider's timeouts.request
	r.use.ttft = time.Since(r.started)
	br := &binaryRelay{r: r, t: t, resp: resp, body: body, first: first[:n], eof: errors.Is(err, io.EOF),
		idle: idleArm{conn: upstream.ConnOf(resp.LocalAddr()), idleFor: up.StreamIdle()}}
	r.caller.relayUp.Store(br.idle.conn) // a caller that leaves from now on cuts the relay's read
	return attemptResult{done: true, outcome: outcome{binary: br}}
}

func (br *binaryRelay) start(c *fiber.Ctx) {
	br.r.setServedBy(c, br.t)
	c.Status(http.StatusOK)
	ct := string(br.resp.Header.ContentType())
	if ct == "" {
		ct = "application/octet-stream"
	}
	c.Set(fiber.HeaderContentType, ct)
	br.wr = writeArm{ctx: c.Context(), idleFor: br.idle.idleFor}
	c.Context().Response.SetBodyStream(br, -1)
}

// errAudioCut fails the caller's chunked body when the upstream's audio
// stops part-way: the caller's client sees the answer end without its
// last chunk, not a shorter file that looks whole.
var errAudioCut = errors.New("the upstream audio stream was cut")

// errCallerGone ends a relayed answer whose caller went away.
var errCallerGone = errors.New("the caller went away")

func (br *binaryRelay) Read(p []byte) (int, error) {
	r := br.r
	if br.cut {
		return 0, errAudioCut
	}
	now := time.Now()
	if len(br.first) > 0 {
		br.wr.arm(r, now) // the write of what this read returns
		n := copy(p, br.first)
		br.first = br.first[n:]
		r.noteStream(p[:n])
		return n, nil
	}
	if br.eof {
		br.atEOF, r.use.streamDone = true, true
		return 0, io.EOF
	}
	if r.caller.gone.Load() { // read before relayUp is: see callerGone
		return 0, errCallerGone
	}
	br.idle.arm(r, now)
	n, err := br.body.Read(p)
	if n > 0 {
		br.wr.arm(r, time.Now()) // after the read: its wait is not the caller's
		r.noteStream(p[:n])
	}
	switch {
	case errors.Is(err, io.EOF):
		br.atEOF, r.use.streamDone = true, true
		if n > 0 {
			return n, nil
		}
		return 0, io.EOF
	case err != nil && r.caller.gone.Load():
		return 0, errCallerGone // the caller left: its read was cut
	case err != nil:
		r.class = classStreamIncomplete // the audio stopped part-way
		r.logger().Warn("audio cut", "provider", br.t.step.Provider.Name, "err", err)
		br.cut = true
		if n > 0 {
			return n, nil
		}
		return 0, errAudioCut
	}
	return n, nil
}

// Close ends the request once the audio is written, or the caller is
// gone (then the upstream connection is closed, not pooled). It leaves
// the caller watch first: from there gone no longer changes, and the
// connection, whose read the watch may have cut, is let go after.
func (br *binaryRelay) Close() error {
	if br.closed {
		return nil
	}
	br.closed = true
	r := br.r
	r.s.callers.remove(r)
	if r.caller.gone.Load() {
		br.atEOF = false
	}
	if !br.atEOF && r.class != classStreamIncomplete {
		r.use.cancelled, r.class = true, classCallerGone
	}
	upstream.CloseBodyStream(br.resp, br.atEOF)
	fasthttp.ReleaseResponse(br.resp)
	br.r.finish(http.StatusOK)
	return nil
}
