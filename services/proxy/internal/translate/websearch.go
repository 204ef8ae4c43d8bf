package translate

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Web search: OpenAI's web_search_options <-> Anthropic's web search server
// tool.

const (
	webSearchToolType = "web_search_20250305"
	webSearchToolName = "web_search"
)

// anthropicWebSearchTool translates web_search_options into the web search
// server tool; search_context_size has no counterpart and is dropped.
func anthropicWebSearchTool(o *chatWebSearchOptions) anthropicTool {
	t := anthropicTool{Type: webSearchToolType, Name: webSearchToolName}
	if l := o.UserLocation; l != nil {
		a := l.Approximate
		if a.City != "" || a.Region != "" || a.Country != "" || a.Timezone != "" {
			t.UserLocation = &anthropicUserLocation{Type: "approximate", City: a.City, Region: a.Region, Country: a.Country, Timezone: a.Timezone}
		}
	}
	return t
}

// isWebSearchTool reports whether an Anthropic tool is the web search
// server tool (any version).
func isWebSearchTool(t *anthropicTool) bool {
	return strings.HasPrefix(t.Type, "web_search_")
}

// chatWebSearchOptionsFor translates the web search server tool into
// web_search_options: user_location is kept, max_uses dropped; domain
// filters have no counterpart and are refused.
func chatWebSearchOptionsFor(t *anthropicTool) (*chatWebSearchOptions, error) {
	switch {
	case len(t.AllowedDomains) > 0:
		return nil, unsupported("web search allowed_domains")
	case len(t.BlockedDomains) > 0:
		return nil, unsupported("web search blocked_domains")
	}
	o := &chatWebSearchOptions{}
	if l := t.UserLocation; l != nil {
		o.UserLocation = &chatWebSearchLocation{Type: "approximate"}
		a := &o.UserLocation.Approximate
		a.City, a.Region, a.Country, a.Timezone = l.City, l.Region, l.Country, l.Timezone
	}
	return o, nil
}

// splitServerTools separates the web search tool from the client tools of
// an Anthropic request; other server tools are refused by chatTools.
func splitServerTools(tools []anthropicTool) (client []anthropicTool, search *anthropicTool, err error) {
	client = make([]anthropicTool, 0, len(tools))
	for i := range tools {
		if isWebSearchTool(&tools[i]) {
			if search != nil {
				return nil, nil, fmt.Errorf("Anthropic messages request: two web search tools: %w", ErrMalformed)
			}
			search = &tools[i]
			continue
		}
		client = append(client, tools[i])
	}
	return client, search, nil
}

// chatAnnotation is an OpenAI url_citation annotation of the content.
type chatAnnotation struct {
	Type        string `json:"type"`
	URLCitation struct {
		StartIndex int    `json:"start_index"`
		EndIndex   int    `json:"end_index"`
		URL        string `json:"url"`
		Title      string `json:"title"`
	} `json:"url_citation"`
}

// appendAnnotations appends a url_citation annotation for each web search
// citation of a text block starting at the start-th character of the
// content: it spans the block's text. Other citations (of documents) are
// dropped.
func appendAnnotations(dst []chatAnnotation, b *anthropicBlock, start int) []chatAnnotation {
	if !present(b.Citations) || b.Citations[0] != '[' {
		return dst
	}
	var cites []anthropicCitation
	if json.Unmarshal(b.Citations, &cites) != nil {
		return dst
	}
	for _, c := range cites {
		if c.Type != "web_search_result_location" || c.URL == "" {
			continue
		}
		var a chatAnnotation
		a.Type = "url_citation"
		a.URLCitation.StartIndex = start
		a.URLCitation.EndIndex = start + utf8.RuneCountInString(b.Text)
		a.URLCitation.URL, a.URLCitation.Title = c.URL, c.Title
		dst = append(dst, a)
	}
	return dst
}
