package proxy

// Guardrail checks that call out: a moderation model, asked through the
// gateway's own pipeline (an in-process moderations request: keys, holds,
// failover and metering as for any other, under the caller's client
// key), and an operator's webhook (a signed POST). Each runs after the
// guardrail's local checks found nothing, within its timeout; a failure
// or a late answer does what the guardrail's on_error says.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"switchyard.dev/services/proxy/internal/clientkey"
	"switchyard.dev/services/proxy/internal/guard"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/jsonfield"
)

// internalCallKey marks a request the gateway makes of itself (a
// moderation check): a user value, which no network request can set.
const internalCallKey = "switchyard.internal"

// internalCall is what an internal request carries: the client key it is
// made for (its usage is that client's), and the request it checks.
type internalCall struct {
	client *clientkey.Key
	parent string
}

// internalOf is the internal call c carries (nil: a caller's request).
func internalOf(c *fiber.Ctx) *internalCall {
	ic, _ := c.Context().UserValue(internalCallKey).(*internalCall)
	return ic
}

// Webhook signing headers: X-Switchyard-Signature is "v1=" and the hex
// HMAC-SHA256, keyed with the webhook's secret, of the timestamp, a dot
// and the body.
const (
	headerWebhookTimestamp = "X-Switchyard-Timestamp"
	headerWebhookSignature = "X-Switchyard-Signature"
)

// maxCheckAnswer is the most of a check's answer that is read.
const maxCheckAnswer = 1 << 20

// webhookClient calls the guardrails' webhooks: no redirects (an answer
// is the endpoint's own), connections kept.
var webhookClient = &http.Client{
	Transport:     &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// remoteChecks runs the remote checks pending on body (q's format) in
// order, appending their decisions to ds, until one blocks.
func (r *request) remoteChecks(q *guard.Request, body []byte, pend []guard.Remote, ds []guard.Decision) []guard.Decision {
	tx := q.Texts
	tx.Reset(body, q.Format)
	texts := make([]string, tx.Len())
	for j := range texts {
		texts[j] = string(tx.Text(j))
	}
	stage := config.StageInput
	if q.Output {
		stage = config.StageOutput
	}
	for i := range pend {
		rm := &pend[i]
		g := rm.Guardrail
		start := time.Now()
		var d guard.Decision
		switch {
		case tx.Cut():
			// more text than is read: not let through unchecked
			d = rm.Decide("texts.too_many", true, config.OnErrorBlock, 0)
		case g.Moderation.On():
			check, err := r.moderate(&g.Moderation, texts)
			d = r.remoteDecision(rm, "moderation", check, err, g.Moderation.OnError, start)
		default:
			check, err := r.callWebhook(g, stage, q.RouteName, texts)
			d = r.remoteDecision(rm, "webhook", check, err, g.Webhook.OnError, start)
		}
		ds = append(ds, d)
		if d.Verdict == config.ActionBlock {
			break
		}
	}
	return ds
}

// remoteDecision is the decision of a remote check of kind (moderation,
// webhook) that found check or failed with err; a failure is logged and
// counted.
func (r *request) remoteDecision(rm *guard.Remote, kind, check string, err error, onError string, start time.Time) guard.Decision {
	if err == nil {
		return rm.Decide(check, false, onError, time.Since(start))
	}
	if onError == "" {
		onError = config.OnErrorAllow
	}
	r.s.metrics.guardrailCheckError(rm.Guardrail.Name, kind)
	r.logger().Warn("guardrail check failed", "guardrail", rm.Guardrail.Name, "check", kind, "on_error", onError, "err", err)
	return rm.Decide(kind+".error", true, onError, time.Since(start))
}

// moderate asks the moderation model about texts through the gateway's
// own pipeline: the check ("moderation.<category>") of the first
// category that counts, "" when none does.
func (r *request) moderate(m *config.GuardrailModeration, texts []string) (string, error) {
	body, err := json.Marshal(struct {
		Model string   `json:"model"`
		Input []string `json:"input"`
	}{m.Model, texts})
	if err != nil {
		return "", err
	}
	ans, err := r.internalCall(epModerations.path, body, config.CheckTimeout(m.Timeout))
	if err != nil {
		return "", fmt.Errorf("the moderation request (model %s) %w", m.Model, err)
	}
	return moderationCheck(ans, m)
}

// internalCall serves a request of the gateway's own (a moderation
// check, a semantic cache's embedding) through its pipeline, in process,
// for the request's client key, within timeout: the answer's body (an
// error for any status but 200).
func (r *request) internalCall(path string, body []byte, timeout time.Duration) ([]byte, error) {
	var req fasthttp.Request
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(path)
	req.Header.SetContentType(fiber.MIMEApplicationJSON)
	req.Header.Set("X-Request-Timeout", strconv.FormatFloat(timeout.Seconds(), 'f', -1, 64))
	req.SetBody(body)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, nil, nil)
	ctx.SetUserValue(internalCallKey, &internalCall{client: r.client, parent: r.id})
	r.s.app.Handler()(&ctx)
	ans := ctx.Response.Body()
	if st := ctx.Response.StatusCode(); st != fiber.StatusOK {
		code, _ := jsonfield.StringValue(jsonfield.Lookup(jsonfield.Lookup(ans, "error")[0], "code")[0])
		return nil, fmt.Errorf("was answered %d %s", st, code)
	}
	return bytes.Clone(ans), nil
}

// moderationCheck reads a moderations answer: the check of the first
// category that counts (m's categories in order, else every category in
// name order; by score at m's threshold, else by the model's flag), ""
// when none does.
func moderationCheck(ans []byte, m *config.GuardrailModeration) (string, error) {
	var v struct {
		Results []struct {
			Flagged        bool               `json:"flagged"`
			Categories     map[string]bool    `json:"categories"`
			CategoryScores map[string]float64 `json:"category_scores"`
		} `json:"results"`
	}
	if err := json.Unmarshal(ans, &v); err != nil || len(v.Results) == 0 {
		return "", errors.New("the moderation answer has no results")
	}
	counts := func(flag bool, score float64) bool {
		if m.Threshold > 0 {
			return score >= m.Threshold
		}
		return flag
	}
	for _, res := range v.Results {
		names := m.Categories
		if len(names) == 0 {
			for c := range res.Categories {
				names = append(names, c)
			}
			for c := range res.CategoryScores {
				if _, ok := res.Categories[c]; !ok {
					names = append(names, c)
				}
			}
			slices.Sort(names)
		}
		for _, c := range names {
			if counts(res.Categories[c], res.CategoryScores[c]) {
				return "moderation." + c, nil
			}
		}
		if len(m.Categories) == 0 && m.Threshold == 0 && res.Flagged {
			return "moderation.flagged", nil
		}
	}
	return "", nil
}

// webhookCall is the body of a webhook check.
type webhookCall struct {
	V         int      `json:"v"`
	Guardrail string   `json:"guardrail"`
	Stage     string   `json:"stage"`
	RequestID string   `json:"request_id"`
	Client    string   `json:"client"`
	Plan      string   `json:"plan"`
	Route     string   `json:"route"`
	Endpoint  string   `json:"endpoint"`
	Model     string   `json:"model"`
	Texts     []string `json:"texts"`
}

// callWebhook asks g's webhook about texts: "webhook" when it answers
// {"verdict":"fail"}, "" for {"verdict":"pass"}.
func (r *request) callWebhook(g *config.Guardrail, stage, routeName string, texts []string) (string, error) {
	w := &g.Webhook
	call := webhookCall{V: 1, Guardrail: g.Name, Stage: stage, RequestID: r.id, Route: routeName,
		Endpoint: r.ep.path, Model: r.model, Texts: texts}
	if r.client != nil {
		call.Client, call.Plan = r.client.ID, r.client.Plan
	}
	body, err := json.Marshal(call)
	if err != nil {
		return "", err
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	ctx, cancel := context.WithTimeout(context.Background(), config.CheckTimeout(w.Timeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", fiber.MIMEApplicationJSON)
	req.Header.Set("User-Agent", "switchyard-guardrail/1")
	req.Header.Set(headerRequestID, r.id)
	req.Header.Set(headerWebhookTimestamp, ts)
	req.Header.Set(headerWebhookSignature, WebhookSignature(w.Value.Reveal(), ts, body))
	resp, err := webhookClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL: its query may hold a token of the operator's
		}
		return "", fmt.Errorf("the webhook at %s: %w", req.URL.Host, err)
	}
	defer resp.Body.Close()
	ans, err := io.ReadAll(io.LimitReader(resp.Body, maxCheckAnswer))
	if err != nil {
		return "", err
	}
	if resp.StatusCode/100 != 2 {
		return "", fmt.Errorf("the webhook answered %d", resp.StatusCode)
	}
	var v struct {
		Verdict string `json:"verdict"`
	}
	if err := json.Unmarshal(ans, &v); err == nil {
		switch v.Verdict {
		case "pass":
			return "", nil
		case "fail":
			return "webhook", nil
		}
	}
	return "", errors.New(`the webhook's answer is not {"verdict":"pass"} or {"verdict":"fail"}`)
}

// WebhookSignature is the X-Switchyard-Signature of a webhook call: "v1="
// and the hex HMAC-SHA256 of timestamp + "." + body, keyed with secret.
func WebhookSignature(secret, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1=" + hex.EncodeToString(mac.Sum(nil))
}
