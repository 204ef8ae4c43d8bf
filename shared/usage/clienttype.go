package usage

import (
	"math/bits"
	"strings"
)

// The client identifiers ClientType returns. They are stable: dashboards and
// metrics labels use them.
const (
	ClientClaudeCode             = "claude-code"
	ClientCursor                 = "cursor"
	ClientCodex                  = "codex"
	ClientCline                  = "cline"
	ClientCopilot                = "copilot"
	ClientAider                  = "aider"
	ClientContinue               = "continue"
	ClientRooCode                = "roo-code"
	ClientWindsurf               = "windsurf"
	ClientZed                    = "zed"
	ClientOpenAISDKPython        = "openai-sdk-python"
	ClientOpenAISDKNode          = "openai-sdk-node"
	ClientOpenAISDKGo            = "openai-sdk-go"
	ClientOpenAISDKOther         = "openai-sdk-other"
	ClientAnthropicSDKPython     = "anthropic-sdk-python"
	ClientAnthropicSDKTypeScript = "anthropic-sdk-typescript"
	ClientAnthropicSDKGo         = "anthropic-sdk-go"
	ClientAnthropicSDKOther      = "anthropic-sdk-other"
	ClientCurl                   = "curl"
	ClientUnknown                = "unknown"
)

// clientTypes lists every identifier, in the order of ClientTypes.
var clientTypes = [...]string{
	ClientClaudeCode, ClientCursor, ClientCodex, ClientCline, ClientCopilot,
	ClientAider, ClientContinue, ClientRooCode, ClientWindsurf, ClientZed,
	ClientOpenAISDKPython, ClientOpenAISDKNode, ClientOpenAISDKGo, ClientOpenAISDKOther,
	ClientAnthropicSDKPython, ClientAnthropicSDKTypeScript, ClientAnthropicSDKGo, ClientAnthropicSDKOther,
	ClientCurl, ClientUnknown,
}

// ClientTypes returns every identifier ClientType can return (a new slice
// each call), for documentation and for pre-registering metric labels.
func ClientTypes() []string { return append([]string(nil), clientTypes[:]...) }

// matchKind is how a rule compares itself with one product token
// (name/version) of a User-Agent.
type matchKind uint8

const (
	// byName: the product name is the rule's name.
	byName matchKind = iota
	// byPrefix: the product name starts with the rule's name and is longer.
	byPrefix
	// bySDK: a Stainless SDK token "<Class>/<Language> <version>": the
	// product name contains the rule's name (the client class may be
	// AsyncOpenAI, AzureOpenAI, AnthropicBedrock, ...) and the part after
	// the slash is the rule's language.
	bySDK
	// bySDKOther: an SDK token in any other language (letters after the
	// slash: Java, Ruby, ...), or the rule's name exactly with a version
	// after the slash, as the .NET SDK sends "OpenAI/2.1.0 (.NET 8.0...)".
	bySDKOther
)

// rule is one line of the client table. name and lang are lower case.
type rule struct {
	kind   matchKind
	name   string
	lang   string
	client string
}

// rules is the client table, first match wins: among all product tokens of
// a User-Agent, the one matching the earliest rule names the client. Tools
// come before SDKs because tools are built on them and may carry their
// token; curl comes last. The tests cite where each form was seen.
var rules = [...]rule{
	// claude-cli/<v> (external, cli|sdk-cli|sdk-py, ...) on messages;
	// claude-code/<v> on GET /v1/models.
	{byName, "claude-cli", "", ClientClaudeCode},
	{byName, "claude-code", "", ClientClaudeCode},
	// <originator>/<v> (<os> <version>; <arch>) <terminal>: codex_cli_rs,
	// codex_exec, codex_vscode, ... and codex-tui.
	{byPrefix, "codex_", "", ClientCodex},
	{byName, "codex-tui", "", ClientCodex},
	// Electron apps: "Mozilla/5.0 (...) AppleWebKit/537.36 (KHTML, like
	// Gecko) Cursor/<v> Chrome/<v> Electron/<v> Safari/537.36".
	{byName, "cursor", "", ClientCursor},
	{byName, "windsurf", "", ClientWindsurf},
	{byName, "cline", "", ClientCline},
	{byName, "githubcopilotchat", "", ClientCopilot},
	{byName, "aider", "", ClientAider},
	{byName, "continue", "", ClientContinue},
	{byName, "continue-cli", "", ClientContinue},
	{byName, "roocode", "", ClientRooCode},
	{byName, "roo-code", "", ClientRooCode},
	{byName, "roo-cline", "", ClientRooCode},
	{byName, "zed", "", ClientZed},
	// OpenAI SDKs: "<Class>/Python <v>" (OpenAI, AsyncOpenAI, AzureOpenAI,
	// AsyncAzureOpenAI), "OpenAI/JS <v>", "OpenAI/Go <v>",
	// "OpenAIClientImpl/Java <v>", "OpenAI::Client/Ruby <v>", "OpenAI/<v>"
	// (.NET).
	{bySDK, "openai", "python", ClientOpenAISDKPython},
	{bySDK, "openai", "js", ClientOpenAISDKNode},
	{bySDK, "openai", "go", ClientOpenAISDKGo},
	{bySDKOther, "openai", "", ClientOpenAISDKOther},
	// Anthropic SDKs: "<Class>/Python <v>" (Anthropic, AsyncAnthropic,
	// AnthropicBedrock, AnthropicVertex, ...), "Anthropic/JS <v>",
	// "Anthropic/Go <v>".
	{bySDK, "anthropic", "python", ClientAnthropicSDKPython},
	{bySDK, "anthropic", "js", ClientAnthropicSDKTypeScript},
	{bySDK, "anthropic", "go", ClientAnthropicSDKGo},
	{bySDKOther, "anthropic", "", ClientAnthropicSDKOther},
	{byName, "curl", "", ClientCurl},
}

// maxUserAgent bounds the bytes ClientType reads: real User-Agents are a
// few hundred bytes, and a hostile one must not cost more.
const maxUserAgent = 1024

// ClientType names the client that sent userAgent: one of the Client*
// identifiers, ClientUnknown for an empty, unrecognised or browser
// User-Agent. Matching ignores case and what is inside parentheses; only
// the first 1 KiB is read. It does not allocate.
func ClientType(userAgent string) string {
	ua := userAgent
	if len(ua) > maxUserAgent {
		ua = ua[:maxUserAgent]
	}
	best := len(rules)
	for i := 0; best > 0; {
		var name, version string
		var ok bool
		name, version, i, ok = nextProduct(ua, i)
		if !ok {
			break
		}
		best = firstRule(name, version, best)
	}
	if best == len(rules) {
		return ClientUnknown
	}
	return rules[best].client
}

// ruleIndex narrows the rules firstRule tries for a token: byFirst[c] has
// bit r set for each name rule (byName, byPrefix) whose name starts with
// byte c, sdk has bit r set for each SDK rule, and sdkOther for each
// bySDKOther rule (the only ones a numeric version can match).
type ruleIndex struct {
	byFirst  [256]uint32
	sdk      uint32
	sdkOther uint32
}

// The index holds one bit per rule.
var _ [32 - len(rules)]struct{}

// rulesIndex is derived from rules, once.
var rulesIndex = indexRules()

// indexRules builds the ruleIndex of rules.
func indexRules() (ix ruleIndex) {
	for r, rl := range rules {
		switch rl.kind {
		case byName, byPrefix:
			ix.byFirst[rl.name[0]] |= 1 << r
		case bySDK:
			ix.sdk |= 1 << r
		case bySDKOther:
			ix.sdk |= 1 << r
			ix.sdkOther |= 1 << r
		}
	}
	return ix
}

// firstRule returns the index of the first of rules[:limit] that the
// product token name/version matches, or limit.
func firstRule(name, version string, limit int) int {
	if name == "" {
		return limit
	}
	letters := isLetters(version)
	numeric := version != "" && version[0] >= '0' && version[0] <= '9'
	candidates := rulesIndex.byFirst[lower(name[0])]
	if letters {
		candidates |= rulesIndex.sdk
	} else if numeric {
		candidates |= rulesIndex.sdkOther
	}
	candidates &= 1<<limit - 1
	for candidates != 0 {
		r := bits.TrailingZeros32(candidates)
		candidates &= candidates - 1
		rl := &rules[r]
		var ok bool
		switch rl.kind {
		case byName:
			ok = equalFold(name, rl.name)
		case byPrefix:
			ok = len(name) > len(rl.name) && equalFold(name[:len(rl.name)], rl.name)
		case bySDK:
			ok = equalFold(version, rl.lang) && containsFold(name, rl.name)
		case bySDKOther:
			ok = letters && containsFold(name, rl.name) || numeric && equalFold(name, rl.name)
		}
		if ok {
			return r
		}
	}
	return limit
}

// nextProduct returns the product token of ua at or after i, split at its
// first slash into name and version (version is empty without a slash),
// and the index after it. Comments in parentheses, which may nest, are
// skipped; an unclosed one runs to the end. ok is false at the end of ua.
func nextProduct(ua string, i int) (name, version string, next int, ok bool) {
	for i < len(ua) {
		switch ua[i] {
		case ' ', '\t':
			i++
		case '(':
			for depth := 0; ; {
				j := strings.IndexByte(ua[i:], ')')
				if j < 0 {
					return "", "", len(ua), false
				}
				depth += strings.Count(ua[i:i+j], "(") - 1
				i += j + 1
				if depth <= 0 {
					break
				}
			}
		default:
			rest := ua[i:]
			end := strings.IndexByte(rest, ' ')
			if end < 0 {
				end = len(rest)
			}
			slash := -1
		scan:
			for k := 0; k < end; k++ {
				switch rest[k] {
				case '(', '\t':
					end = k
					break scan
				case '/':
					if slash < 0 {
						slash = k
					}
				}
			}
			if slash < 0 {
				return rest[:end], "", i + end, true
			}
			return rest[:slash], rest[slash+1 : end], i + end, true
		}
	}
	return "", "", i, false
}

// lower returns c in lower case if it is an ASCII letter.
func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// equalFold reports whether s equals low, a lower-case ASCII string,
// ignoring ASCII case.
func equalFold(s, low string) bool {
	if len(s) != len(low) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if lower(s[i]) != low[i] {
			return false
		}
	}
	return true
}

// containsFold reports whether s contains low, a lower-case ASCII string,
// ignoring ASCII case.
func containsFold(s, low string) bool {
	for i := 0; i+len(low) <= len(s); i++ {
		if lower(s[i]) == low[0] && equalFold(s[i:i+len(low)], low) {
			return true
		}
	}
	return false
}

// isLetters reports whether s is a non-empty run of ASCII letters (an SDK
// language: Python, JS, Java, ...).
func isLetters(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i] | 0x20; c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}
