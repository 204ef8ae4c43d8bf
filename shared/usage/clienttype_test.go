package usage

import (
	"slices"
	"strings"
	"testing"
)

// TestClientType runs User-Agents as the clients send them. The comment
// above each case says where the string was seen: an issue or pull request
// quoting captured traffic, or the client's own source (file, commit and
// release) that builds it. "format from" marks a string built from the
// format a source gives, with a plausible version number; "constructed"
// marks a case written to pin a rule.
func TestClientType(t *testing.T) {
	tests := []struct {
		name, ua, want string
	}{
		// Claude Code: claude-cli/<version> (external, <entrypoint>).

		// https://github.com/RimantasZ/contextspy/issues/20
		{"claude code cli", "claude-cli/2.1.216 (external, cli)", ClientClaudeCode},
		// https://github.com/anthropics/claude-code/issues/80191
		{"claude code cli, older", "claude-cli/2.1.205 (external, cli)", ClientClaudeCode},
		// mitm capture in github.com/RavenStorm-bit/claude-code-api-logger full-requests-clean.md
		{"claude code 0.2, no entrypoint", "claude-cli/0.2.107 (external)", ClientClaudeCode},
		// https://github.com/plmbr/notebook-intelligence/pull/140 (Claude
		// Agent SDK: the SDK hint is inside the comment)
		{"claude agent sdk", "claude-cli/2.1.105 (external, sdk-py, agent-sdk/0.1.59)", ClientClaudeCode},
		// a live capture of GET /v1/models quoted in a public gateway's test
		// file (search index; it did not name the repository)
		{"claude code models listing", "claude-code/2.1.295", ClientClaudeCode},
		// https://github.com/anthropics/claude-code/issues/80191: pre-flight
		// probes carry a minified SDK class name, nothing to match
		{"claude code probe, obfuscated", "Dmi/JS 0.94.0", ClientUnknown},

		// Codex: <originator>/<version> (<os> <version>; <arch>) <terminal>,
		// get_codex_user_agent in github.com/openai/codex
		// codex-rs/login/src/auth/default_client.rs.

		// https://github.com/Wei-Shaw/sub2api/issues/3646
		{"codex cli, windows terminal", "codex_cli_rs/0.132.0 (Windows 10.0.26100; x86_64) WindowsTerminal", ClientCodex},
		// https://github.com/Wei-Shaw/sub2api/issues/3646
		{"codex cli, xterm", "codex_cli_rs/0.125.0 (Ubuntu 22.4.0; x86_64) xterm-256color", ClientCodex},
		// format from default_client.rs; originator codex_exec from
		// https://github.com/openai/codex/pull/4485
		{"codex exec", "codex_exec/0.130.0 (Mac OS 15.5.0; arm64) iTerm.app/3.5.14", ClientCodex},
		// format from default_client.rs; codex-tui is a first-party
		// originator there (is_first_party_originator)
		{"codex tui originator", "codex-tui/0.116.0 (Mac OS 15.5.0; arm64) ghostty/1.1.3", ClientCodex},
		// https://github.com/tutti-os/tutti/pull/374: Codex's app server
		// under the host's own originator names the host, not Codex
		{"codex app-server under a third-party originator", "tutti-desktop/0.130.0 (...) (tutti-desktop; 0.1.0)", ClientUnknown},

		// Electron editors: the product token sits among browser tokens.

		// sent by several public clients of api2.cursor.sh that copy Cursor
		// 0.48.6's User-Agent (search index; repositories not named);
		// Chromium 132.0.6834.210 as in https://github.com/cursor/cursor/issues/3574
		{"cursor", "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Cursor/0.48.6 Chrome/132.0.6834.210 Electron/34.3.4 Safari/537.36", ClientCursor},
		// a login audit log committed to a public repository (search index;
		// repository not named)
		{"cursor 2.x, macOS", "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Cursor/2.1.49 Chrome/138.0.7204.251 Electron/37.7.0 Safari/537.36", ClientCursor},
		// a session table committed to a public repository (search index;
		// repository not named)
		{"windsurf", "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Windsurf/1.99.1 Chrome/132.0.6834.210 Electron/34.3.2 Safari/537.36", ClientWindsurf},
		// reverse-engineering notes on Windsurf's language server (search
		// index; repository not named)
		{"windsurf, linux", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Windsurf/1.110.1 Chrome/142.0.7444.265 Electron/39.6.0 Safari/537.36", ClientWindsurf},

		// Cline.

		// format from github.com/cline/cline src/services/EnvUtils.ts
		// (buildExternalBasicHeaders: `Cline/${ExtensionRegistryInfo.version}`)
		{"cline", "Cline/3.74.0", ClientCline},
		// https://github.com/cline/cline/issues/5670: older Cline sent the
		// OpenAI SDK's own agent
		{"older cline sent the SDK's agent", "OpenAI/JS 4.96.0", ClientOpenAISDKNode},
		// https://github.com/cline/cline/issues/8720 (minified SDK classes)
		{"older cline, minified SDK class", "Rs/JS 4.83.0", ClientUnknown},
		// https://github.com/cline/cline/issues/8720
		{"older cline, minified SDK class 2", "Sn/JS 5.5.1", ClientUnknown},

		// GitHub Copilot Chat.

		// https://github.com/ericc-ch/copilot-api/issues/9
		{"copilot chat", "GitHubCopilotChat/0.23.2", ClientCopilot},
		// https://github.com/smilexizheng/coco-boot/pull/6
		{"copilot chat, older", "GitHubCopilotChat/0.11.1", ClientCopilot},

		// aider, when it sends its own agent; by default LiteLLM sends the
		// OpenAI SDK's or litellm's.

		// format from https://github.com/Aider-AI/aider/pull/4898 (User-Agent: aider/{version})
		{"aider", "aider/0.86.1", ClientAider},
		// format from https://github.com/BerriAI/litellm/pull/4591 (litellm/{version})
		{"litellm underneath", "litellm/1.77.0", ClientUnknown},

		// Continue.

		// format from https://github.com/continuedev/continue/pull/8532
		// (Continue/<extensionVersion> (<ideName>; <ideType>))
		{"continue extension", "Continue/1.2.10 (Visual Studio Code; vscode)", ClientContinue},
		// format from https://github.com/continuedev/continue/pull/8532 (Continue-CLI/<version>)
		{"continue cli", "Continue-CLI/1.5.3", ClientContinue},
		// https://github.com/continuedev/continue/issues/1160 (before it set one)
		{"continue, node-fetch default", "node-fetch", ClientUnknown},

		// Roo Code.

		// format from github.com/RooCodeInc/Roo-Code src/api/providers/constants.ts
		// (`RooCode/${Package.version}`)
		{"roo code", "RooCode/3.25.1", ClientRooCode},
		// https://github.com/RooCodeInc/Roo-Code/pull/5492
		{"roo code, earlier name", "roo-cline/3.22.6", ClientRooCode},

		// Zed: Zed/<version> (<os>; <arch>) on all its HTTP requests since
		// https://github.com/zed-industries/zed/pull/15470.

		// a public Zed API adapter copying Zed's agent (search index;
		// repository not named)
		{"zed", "Zed/0.179.4 (macos; x86_64)", ClientZed},
		// a public Neovim plugin copying Zed's agent (search index;
		// repository not named)
		{"zed, apple silicon", "Zed/0.174.6 (macos; aarch64)", ClientZed},
		// a public adapter's ACP agent (search index; repository not named):
		// zed appears only inside the comment
		{"zed named only inside a comment", "antigravity/acp/0.1.0 (aidev_client; os_type=windows; arch=amd64; host_path=zed/0.180.0; proxy_client=antigravity/sdk)", ClientUnknown},

		// OpenAI SDKs.

		// f"{self.__class__.__name__}/Python {version}" in github.com/openai/openai-python
		// src/openai/_base_client.py (e43b4224, 3.3.1); the client classes
		// are OpenAI, AsyncOpenAI, AzureOpenAI and AsyncAzureOpenAI.
		{"openai python", "OpenAI/Python 3.3.1", ClientOpenAISDKPython},
		{"openai python async", "AsyncOpenAI/Python 3.3.1", ClientOpenAISDKPython},
		{"openai python azure", "AzureOpenAI/Python 3.3.1", ClientOpenAISDKPython},
		{"openai python async azure", "AsyncAzureOpenAI/Python 3.3.1", ClientOpenAISDKPython},
		// `${this.constructor.name}/JS ${VERSION}` in github.com/openai/openai-node
		// src/client.ts (7b7d6ca, 7.5.0)
		{"openai node", "OpenAI/JS 7.5.0", ClientOpenAISDKNode},
		// "OpenAI/Go %s" in github.com/openai/openai-go
		// internal/requestconfig/requestconfig.go (4e5a07a, 3.52.0)
		{"openai go", "OpenAI/Go 3.52.0", ClientOpenAISDKGo},
		// "${javaClass.simpleName}/Java ${getPackageVersion()}" in github.com/openai/openai-java
		// openai-java-core/.../OpenAIClientImpl.kt and OpenAIClientAsyncImpl.kt (5f499c3, 4.52.0)
		{"openai java", "OpenAIClientImpl/Java 4.52.0", ClientOpenAISDKOther},
		{"openai java async", "OpenAIClientAsyncImpl/Java 4.52.0", ClientOpenAISDKOther},
		// "#{self.class.name}/Ruby #{OpenAI::VERSION}" in github.com/openai/openai-ruby
		// lib/openai/internal/transport/base_client.rb (edfb30b, 0.80.0)
		{"openai ruby", "OpenAI::Client/Ruby 0.80.0", ClientOpenAISDKOther},
		// "{assemblyName}/{version} ({framework}; {os})" in github.com/openai/openai-dotnet
		// OpenAI/src/Utility/TelemetryDetails.cs (b3b4bbb, 2.13.0)
		{"openai dotnet", "OpenAI/2.13.0 (.NET 8.0.11; Microsoft Windows 10.0.22631)", ClientOpenAISDKOther},

		// Anthropic SDKs.

		// f"{self.__class__.__name__}/Python {version}" in github.com/anthropics/anthropic-sdk-python
		// src/anthropic/_base_client.py (009b035, 0.121.0); classes Anthropic,
		// AsyncAnthropic, AnthropicBedrock, AsyncAnthropicVertex, ...
		{"anthropic python", "Anthropic/Python 0.121.0", ClientAnthropicSDKPython},
		{"anthropic python async", "AsyncAnthropic/Python 0.121.0", ClientAnthropicSDKPython},
		{"anthropic python bedrock", "AnthropicBedrock/Python 0.121.0", ClientAnthropicSDKPython},
		{"anthropic python vertex async", "AsyncAnthropicVertex/Python 0.121.0", ClientAnthropicSDKPython},
		// https://github.com/plmbr/notebook-intelligence/pull/140
		{"anthropic python in the wild", "Anthropic/Python 0.82.0", ClientAnthropicSDKPython},
		// `Anthropic/JS ${VERSION}` in github.com/anthropics/anthropic-sdk-typescript
		// src/client.ts (bfa9197, 0.120.0)
		{"anthropic typescript", "Anthropic/JS 0.120.0", ClientAnthropicSDKTypeScript},
		// "Anthropic/Go %s" in github.com/anthropics/anthropic-sdk-go
		// internal/requestconfig/requestconfig.go (b43f0d7, 1.60.0)
		{"anthropic go", "Anthropic/Go 1.60.0", ClientAnthropicSDKGo},
		// "AnthropicClientImpl/Java ${getPackageVersion()}" in github.com/anthropics/anthropic-sdk-java
		// anthropic-java-core/.../AnthropicClientImpl.kt (version constructed)
		{"anthropic java", "AnthropicClientImpl/Java 2.5.0", ClientAnthropicSDKOther},

		// curl/<version> unless -A is given (curl(1)).
		{"curl", "curl/8.7.1", ClientCurl},

		// Nothing to name.

		{"empty", "", ClientUnknown},
		// example value in github.com/openai/openai-java api_reference/openapi.transformed.yml
		{"browser", "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/91.0.4472.124 Safari/537.36", ClientUnknown},
		// https://github.com/lidge-jun/opencodex/issues/1751
		{"bun runtime", "Bun/1.3.14", ClientUnknown},
		// constructed: httpx's default form
		{"httpx", "python-httpx/0.27.0", ClientUnknown},
		// constructed
		{"openai named without a language", "openai", ClientUnknown},
		// constructed: only the bare vendor name takes a numeric version
		{"openai in a product name with a version", "litellm-openai/1.0.0", ClientUnknown},

		// Precedence and matching, constructed to pin the rules.

		{"tool before the sdk it carries", "Cline/3.74.0 OpenAI/JS 4.96.0", ClientCline},
		{"tool after the sdk it carries", "OpenAI/JS 4.96.0 Cline/3.74.0", ClientCline},
		{"claude code after an anthropic sdk token", "Anthropic/JS 0.120.0 claude-cli/2.1.216 (external, cli)", ClientClaudeCode},
		{"sdk before curl", "curl/8.7.1 OpenAI/Python 3.3.1", ClientOpenAISDKPython},
		{"case ignored", "CLAUDE-CLI/2.1.216 (external, cli)", ClientClaudeCode},
		{"lower-case sdk", "openai/python 3.3.1", ClientOpenAISDKPython},
		{"name must be whole", "cursorx/1.0", ClientUnknown},
		{"codex prefix needs more", "codex_/1.0", ClientUnknown},
		{"unclosed comment", "curl/8.7.1 (unclosed Cursor/1.0", ClientCurl},
		{"nested comment", "x/1 (a (Cursor/1.0) b) curl/8.7.1", ClientCurl},
		{"tab separated", "x/1\tZed/0.174.6", ClientZed},
		{"only the first KiB is read", strings.Repeat("a", maxUserAgent) + " Cursor/1.0", ClientUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ClientType(tt.ua); got != tt.want {
				t.Errorf("ClientType(%q) = %q, want %q", tt.ua, got, tt.want)
			}
		})
	}
}

// TestClientTypesComplete checks that ClientTypes lists each identifier the
// table can return, once, and ClientUnknown.
func TestClientTypesComplete(t *testing.T) {
	list := ClientTypes()
	for _, r := range rules {
		if !slices.Contains(list, r.client) {
			t.Errorf("rule %q names %q, missing from ClientTypes", r.name, r.client)
		}
	}
	if !slices.Contains(list, ClientUnknown) {
		t.Error("ClientTypes lacks ClientUnknown")
	}
	seen := map[string]bool{}
	for _, c := range list {
		if seen[c] {
			t.Errorf("ClientTypes lists %q twice", c)
		}
		seen[c] = true
		if c != strings.ToLower(c) || strings.ContainsAny(c, " _.") {
			t.Errorf("identifier %q: want lower case with '-' only", c)
		}
	}
	list[0] = "changed"
	if ClientTypes()[0] == "changed" {
		t.Error("ClientTypes returns its own array")
	}
}

// TestRulesWellFormed guards the table: matching compares against
// non-empty lower-case names (an upper-case letter would never match), and
// only SDK rules have a language.
func TestRulesWellFormed(t *testing.T) {
	for _, r := range rules {
		if r.name == "" || r.name != strings.ToLower(r.name) || r.lang != strings.ToLower(r.lang) {
			t.Errorf("rule %q/%q: want a non-empty lower-case name and language", r.name, r.lang)
		}
		if (r.kind == bySDK) != (r.lang != "") {
			t.Errorf("rule %q: a language goes with bySDK and only with it", r.name)
		}
	}
}

func TestClientTypeDoesNotAllocate(t *testing.T) {
	for _, ua := range benchUserAgents {
		if n := testing.AllocsPerRun(100, func() { ClientType(ua) }); n != 0 {
			t.Errorf("ClientType(%q) allocates %.0f times", ua, n)
		}
	}
}
