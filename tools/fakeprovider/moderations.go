package fakeprovider

import (
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"strings"
)

// OpenAI moderations (POST /v1/moderations).

// moderationCategories are the categories of omni-moderation, in the order
// OpenAI lists them.
var moderationCategories = []string{
	"harassment", "harassment/threatening", "hate", "hate/threatening",
	"illicit", "illicit/violent",
	"self-harm", "self-harm/intent", "self-harm/instructions",
	"sexual", "sexual/minors", "violence", "violence/graphic",
}

// FlagMarker in a moderation input makes the fake flag it (category
// "violence", score 0.98); any other input is not flagged.
const FlagMarker = "fakeprovider:flag"

type moderationResult struct {
	Flagged                   bool                `json:"flagged"`
	Categories                map[string]bool     `json:"categories"`
	CategoryScores            map[string]float64  `json:"category_scores"`
	CategoryAppliedInputTypes map[string][]string `json:"category_applied_input_types"`
}

// moderationInput is one input to moderate: its text (or image URL) and
// kind ("text" or "image").
type moderationInput struct {
	text, kind string
}

// moderationInputs reads "input": a string, strings, or multimodal parts
// ({"type":"text","text":...} or {"type":"image_url","image_url":{"url":...}}).
func moderationInputs(raw json.RawMessage) ([]moderationInput, bool) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []moderationInput{{one, "text"}}, true
	}
	var many []json.RawMessage
	if json.Unmarshal(raw, &many) != nil || len(many) == 0 {
		return nil, false
	}
	out := make([]moderationInput, len(many))
	for i, m := range many {
		if json.Unmarshal(m, &one) == nil {
			out[i] = moderationInput{one, "text"}
			continue
		}
		var part struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			ImageURL struct {
				URL string `json:"url"`
			} `json:"image_url"`
		}
		if json.Unmarshal(m, &part) != nil {
			return nil, false
		}
		switch part.Type {
		case "text":
			out[i] = moderationInput{part.Text, "text"}
		case "image_url":
			out[i] = moderationInput{part.ImageURL.URL, "image"}
		default:
			return nil, false
		}
	}
	return out, true
}

// moderate scores one input: tiny scores derived from a hash of the text,
// so the same input always scores the same.
func moderate(in moderationInput) moderationResult {
	r := moderationResult{
		Categories:                make(map[string]bool, len(moderationCategories)),
		CategoryScores:            make(map[string]float64, len(moderationCategories)),
		CategoryAppliedInputTypes: make(map[string][]string, len(moderationCategories)),
	}
	h := sha256.Sum256([]byte(in.text))
	for i, c := range moderationCategories {
		r.Categories[c] = false
		r.CategoryScores[c] = float64(h[i]+1) * 1e-6
		kinds := []string{"text"}
		if in.kind == "image" {
			kinds = []string{"image"}
		}
		r.CategoryAppliedInputTypes[c] = kinds
	}
	if strings.Contains(in.text, FlagMarker) {
		r.Flagged = true
		r.Categories["violence"] = true
		r.CategoryScores["violence"] = 0.98
	}
	return r
}

func (s *Server) serveModerations(w http.ResponseWriter, req *request) {
	inputs, ok := moderationInputs(req.body.Input)
	if !ok {
		s.writeError(w, req, "openai.bad_request", 0, 0)
		return
	}
	model := req.call.Model
	if model == "" {
		model = "omni-moderation-latest"
	}
	out := struct {
		ID      string             `json:"id"`
		Model   string             `json:"model"`
		Results []moderationResult `json:"results"`
	}{s.newID("modr-"), model, make([]moderationResult, len(inputs))}
	for i, in := range inputs {
		out.Results[i] = moderate(in)
	}
	s.writeJSON(w, req, out)
}
