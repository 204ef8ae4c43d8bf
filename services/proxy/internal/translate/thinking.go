package translate

import (
	"fmt"
	"strings"
)

// Extended thinking (Anthropic) <-> reasoning effort (OpenAI).
//
// OpenAI -> Anthropic, reasoning_effort -> thinking.budget_tokens:
// minimal 1024, low 2048, medium 8192, high 16384, xhigh 32768; none is no
// thinking. Anthropic -> OpenAI, budget_tokens -> reasoning_effort: below
// 4096 low, below 16384 medium, from 16384 high; so low, medium and high
// come back as they were, and minimal comes back low.
const (
	budgetMinimal = 1024 // Anthropic's smallest budget
	budgetLow     = 2048
	budgetMedium  = 8192
	budgetHigh    = 16384
	budgetXHigh   = 32768

	thresholdMedium = 4096
	thresholdHigh   = 16384
)

// budgetFor returns the thinking budget for an OpenAI reasoning_effort; 0
// for "none".
func budgetFor(effort string) (int, error) {
	switch effort {
	case "none":
		return 0, nil
	case "minimal":
		return budgetMinimal, nil
	case "low":
		return budgetLow, nil
	case "medium":
		return budgetMedium, nil
	case "high":
		return budgetHigh, nil
	case "xhigh":
		return budgetXHigh, nil
	}
	return 0, fmt.Errorf("OpenAI chat request: reasoning_effort %q: %w", effort, ErrMalformed)
}

// effortFor returns the OpenAI reasoning_effort for a thinking budget.
func effortFor(budget int) string {
	switch {
	case budget < thresholdMedium:
		return "low"
	case budget < thresholdHigh:
		return "medium"
	}
	return "high"
}

// effortForAdaptive maps Anthropic's output_config.effort, which tunes
// adaptive thinking, to a reasoning_effort: low, medium and high as they
// are, max -> high, absent -> medium.
func effortForAdaptive(effort string) string {
	switch effort {
	case "low", "high":
		return effort
	case "max":
		return "high"
	}
	return "medium"
}

// anthropicThinkingFor sets out.Thinking for an OpenAI reasoning_effort.
// OpenAI's max_completion_tokens counts the reasoning, as Anthropic's
// max_tokens counts the thinking, and Anthropic wants the budget below
// max_tokens: a budget that does not fit is halved down to max_tokens/2,
// and a max_tokens below 2048 leaves no room for thinking (refused). Without
// a limit from the caller, max_tokens is the budget plus the usual default.
func anthropicThinkingFor(out *messagesRequestOut, effort string, maxGiven bool) error {
	budget, err := budgetFor(effort)
	if err != nil || budget == 0 {
		return err
	}
	switch {
	case !maxGiven:
		out.MaxTokens = budget + defaultMaxTokens
	case budget >= out.MaxTokens:
		budget = out.MaxTokens / 2
		if budget < budgetMinimal {
			return unsupported("reasoning_effort with max_completion_tokens below 2048")
		}
	}
	out.Thinking = &anthropicThinking{Type: "enabled", BudgetTokens: budget}
	return nil
}

// reasoningText joins the text of thinking blocks for reasoning_content.
func reasoningText(blocks []anthropicBlock) *string {
	var texts []string
	for _, b := range blocks {
		if b.Type == "thinking" && b.Thinking != "" {
			texts = append(texts, b.Thinking)
		}
	}
	if len(texts) == 0 {
		return nil
	}
	s := strings.Join(texts, partSeparator)
	return &s
}

// signedThinking returns the thinking_blocks of an OpenAI assistant
// message that can go back to Anthropic: thinking blocks with their
// signature, redacted_thinking blocks with their data. Others are dropped,
// as Anthropic refuses thinking it did not sign.
func signedThinking(blocks []anthropicBlock) []anthropicBlock {
	out := make([]anthropicBlock, 0, len(blocks))
	for _, b := range blocks {
		switch {
		case b.Type == "thinking" && b.Signature != nil && *b.Signature != "":
			out = append(out, anthropicBlock{Type: "thinking", Thinking: b.Thinking, Signature: b.Signature})
		case b.Type == "redacted_thinking" && b.Data != "":
			out = append(out, anthropicBlock{Type: "redacted_thinking", Data: b.Data})
		}
	}
	return out
}
