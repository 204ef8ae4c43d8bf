// Package translate converts between the OpenAI Chat Completions API and the
// Anthropic Messages API — requests, responses, streams and error bodies —
// so that one gateway chain can mix providers of either format.
//
// Text conversations, function tools, images, PDFs, structured output,
// extended thinking and web search are translated. Bodies are decoded into
// typed structs that list the fields read and the fields refused; other
// unknown fields are ignored, so new optional parameters pass (dropped)
// rather than fail. Request errors wrap ErrMalformed (not JSON of the right
// shape) or are an *UnsupportedError (a feature below): both are the
// caller's fault, a 400. From a response or stream the same errors mean the
// upstream answered with something the caller's format cannot receive.
//
// # Translated
//
// Requests, OpenAI -> Anthropic (ChatToMessages):
//   - system and developer messages -> the top-level system prompt, joined
//     by a blank line, wherever they stood in the conversation (text
//     blocks instead when a part carries cache_control);
//   - user and assistant messages with string content or text parts ->
//     string content or text blocks; consecutive messages of one role are
//     merged into one turn, as Anthropic turns alternate; empty parts are
//     dropped; an assistant refusal is text;
//   - max_completion_tokens, else max_tokens -> max_tokens (4096 when
//     absent: Anthropic requires it); temperature (above 1, the top of
//     Anthropic's range where OpenAI's is 2, -> 1) and top_p; stop (string
//     or array) -> stop_sequences, without the sequences that are empty or
//     whitespace alone ("\n"), which Anthropic refuses; stream; user ->
//     metadata.user_id;
//   - tools of type function -> tools {name, description, input_schema}
//     (parameters, or an empty object schema when absent; strict is
//     dropped); tool_choice "auto" -> {"type":"auto"}, "required" -> any,
//     {"type":"function","function":{"name":N}} -> {"type":"tool","name":N},
//     "none" -> none (a forced call with thinking: see reasoning_effort);
//     parallel_tool_calls false -> disable_parallel_tool_use (in
//     tool_choice, auto when none was given; tool_choice none cannot carry
//     it). Without tools, tool_choice "none"
//     and "auto" and parallel_tool_calls are dropped; another tool_choice is
//     malformed;
//   - image_url parts -> image blocks: a data URL
//     (data:image/png;base64,...) -> a base64 source with its media_type
//     (image/jpeg, png, gif or webp; another type is refused, naming it), an
//     http(s) URL -> a url source; detail is dropped. Images are translated in
//     user messages and tool results, refused in system messages;
//   - file parts with file_data -> document blocks: a PDF
//     (data:application/pdf;base64,...) -> a base64 source, plain text
//     (data:text/plain;base64,...) -> a text source; filename -> title.
//     A file_id (a file uploaded to OpenAI) and other media types are refused;
//   - cache_control (Anthropic's, which OpenAI clients of Anthropic-backed
//     gateways send) on a content part -> on its block, on a message -> on
//     its last block, on a tool -> on the tool;
//   - reasoning_effort -> thinking {"type":"enabled","budget_tokens":B}:
//     minimal 1024, low 2048, medium 8192, high 16384, xhigh 32768; none ->
//     no thinking. Anthropic wants the budget below max_tokens (both count
//     the thinking, as max_completion_tokens counts the reasoning): without
//     a limit from the caller max_tokens is B + 4096; a budget that does not
//     fit is lowered to half of max_tokens, and below 2048 max tokens
//     reasoning_effort is refused. Beside thinking Anthropic refuses a
//     temperature other than 1, a top_p below 0.95 and a forced tool call,
//     where OpenAI serves them: with thinking, temperature and top_p are
//     dropped, and tool_choice "required" or a named function becomes auto
//     (disable_parallel_tool_use kept) with the system prompt ending in
//     "Answer by calling one or more of the tools provided, not with text
//     alone." or "Answer by calling the N tool, not with text alone.": the
//     model is asked for the call, not forced, as for response_format
//     json_schema below (refusing the request instead would fail a chain
//     whose OpenAI step served it, once it falls over to Anthropic);
//   - an assistant's thinking_blocks (LiteLLM's field: thinking blocks with
//     their signature, redacted_thinking blocks with their data, as
//     MessagesResponseToChat returns them) -> its first blocks, so that a
//     tool loop with thinking continues; reasoning_content is dropped, as
//     Anthropic refuses thinking without its signature, and so are thinking
//     blocks without one;
//   - response_format json_schema -> a tool named json_response (a name
//     reserved: a caller's function of that name is malformed), its
//     input_schema the schema (whose root must be an object), its
//     description naming the schema, which the model is made to call:
//     tool_choice {"type":"tool","name":"json_response"} without tools or
//     with tool_choice none, any with tools and tool_choice auto (a call of
//     the caller's tools or the answer); with tool_choice required or a
//     named function response_format is dropped (a tool call is wanted);
//     with thinking (which allows tool_choice auto alone) the system prompt
//     asks for the tool. The call comes back as the message content (the
//     input as compact JSON) with finish_reason "stop", streamed as content
//     deltas. strict is dropped (Anthropic follows the schema without it).
//     response_format json_object -> the system prompt ends with
//     "Respond only with a single valid JSON object, with no text before or
//     after it." (Anthropic has no JSON mode); text -> nothing;
//   - web_search_options -> the server tool {"type":"web_search_20250305",
//     "name":"web_search"} with its user_location (city, region, country,
//     timezone); search_context_size has no counterpart and is dropped;
//   - an assistant's tool_calls -> tool_use blocks after its text, with the
//     arguments parsed as the input (arguments that are not a JSON object
//     are malformed; empty arguments are {}); tool messages -> tool_result
//     blocks of a user turn, merged with the results and user text around
//     them, as Anthropic turns alternate; ids are kept.
//
// Requests, Anthropic -> OpenAI (MessagesToChat):
//   - system (string or text blocks) -> a first system message; text blocks
//     of a message -> string content, joined by a blank line;
//   - max_tokens -> max_tokens (max_completion_tokens with thinking, see
//     below; the proxy renames it max_completion_tokens for the openai and
//     azure provider types, whose reasoning models refuse max_tokens, while
//     other OpenAI-compatible servers may know only max_tokens);
//     temperature; top_p; stop_sequences -> stop
//     (OpenAI takes at most 4); metadata.user_id -> user; stream -> stream
//     with stream_options.include_usage, so the stream reports usage;
//   - client tools (type absent or custom) -> function tools; tool_choice
//     auto, any, tool, none -> "auto", "required", a named function,
//     "none"; disable_parallel_tool_use -> parallel_tool_calls false;
//   - a user's image blocks -> image_url parts (a base64 source -> a data
//     URL, a url source -> the URL) and PDF document blocks (base64) -> file
//     parts with file_data as a data URL and filename = title
//     ("document.pdf" without one), in order with the text parts; a
//     plain-text document -> a text part (its title and context dropped);
//     citations settings are dropped. Images and documents by file_id, PDFs
//     by URL, and content-source documents are refused, and so are images
//     and documents in tool results (OpenAI tool messages are text);
//   - thinking {"type":"enabled","budget_tokens":B} -> reasoning_effort:
//     low below 4096, medium below 16384, high from 16384 (so the budgets
//     above come back as they went); {"type":"adaptive"} -> output_config's
//     effort (low, medium, high; max -> high; medium when absent);
//     disabled -> nothing. With reasoning, max_tokens is sent as
//     max_completion_tokens, which OpenAI's reasoning models require. An
//     assistant's thinking and redacted_thinking blocks are dropped: the
//     chat format takes no reasoning back;
//   - output_config.format (or the beta's output_format) {"type":
//     "json_schema","schema":S} -> response_format {"type":"json_schema",
//     "json_schema":{"name":"response","schema":S,"strict":true}}; the
//     answer comes back as text. A caller's forced tool stays a tool;
//   - the web search server tool (web_search_*) -> web_search_options with
//     its user_location (max_uses dropped; allowed_domains and
//     blocked_domains refused, OpenAI has no such filter); cache_control
//     markers are dropped everywhere;
//   - an assistant's tool_use blocks -> tool_calls, the input as compact
//     JSON arguments, its text blocks the content (null when there are
//     none); a user's tool_result blocks -> tool messages (text content
//     joined by a blank line; is_error is dropped, OpenAI has no such flag),
//     then its text blocks a user message.
//
// Responses (MessagesResponseToChat, ChatResponseToMessages):
//   - text blocks, concatenated <-> message content; an OpenAI refusal ->
//     a text block and stop_reason "refusal"; tool_use blocks <-> tool_calls
//     (input <-> arguments as compact JSON; content null beside tool calls
//     without text), after the text, ids kept (one generated for an OpenAI
//     call without);
//   - thinking blocks -> reasoning_content (their text, joined by a blank
//     line) and thinking_blocks (the blocks with their signatures, as
//     LiteLLM returns them, to be sent back in the next request). A
//     redacted_thinking block has no text: it is dropped from
//     reasoning_content and kept, with its data, in thinking_blocks. Back,
//     thinking_blocks -> the first blocks of the message (exactly as they
//     came); without them, the reasoning_content of an OpenAI-compatible
//     provider (DeepSeek, vLLM...) -> a thinking block with an empty
//     signature;
//   - web search: server_tool_use (web_search) and web_search_tool_result
//     blocks are dropped, and the web_search_result_location citations of
//     a text block become url_citation annotations spanning that block's
//     text in the content (indices in characters); OpenAI annotations are
//     dropped going to Anthropic, which wants its own encrypted indices;
//   - stop_reason end_turn, stop_sequence, pause_turn -> "stop"; max_tokens,
//     model_context_window_exceeded -> "length"; tool_use -> "tool_calls";
//     refusal -> "content_filter"; and back: stop -> end_turn (OpenAI does
//     not tell a stop sequence apart), length -> max_tokens, tool_calls ->
//     tool_use, content_filter -> refusal;
//   - usage: prompt_tokens = input_tokens + cache writes + cache reads,
//     cached_tokens = cache reads; completion_tokens = output_tokens; and
//     back, input_tokens = prompt_tokens - cached_tokens;
//   - ids: msg_X -> chatcmpl-msg_X and back; chatcmpl-Y -> msg_chatcmpl-Y;
//     generated when absent. created is the translation time. model is the
//     name the caller asked for, not the upstream's.
//
// Streams: see NewMessagesToChatStream and NewChatToMessagesStream. The
// OpenAI stream produced ends with a usage chunk ("choices":[]) when the
// caller asked for it with stream_options.include_usage (includeUsage), as
// OpenAI's does, and only then. The Anthropic stream produced
// has zero usage in message_start, as OpenAI reports usage only at the end;
// message_delta carries it all. Tool calls stream both ways: a tool_use
// block start <-> a first tool_calls delta (index, id, type, name, empty
// arguments), input_json_delta <-> a delta of arguments, one block per call
// index, opened after closing the text block; the text block of the
// Anthropic stream produced opens at the first text, so a stream of tool
// calls alone has no empty text block. Thinking streams both ways:
// thinking_delta <-> a delta of reasoning_content; a signature_delta -> a
// delta with thinking_blocks [{"type":"thinking","thinking":<the block's
// text>,"signature":...}] (LiteLLM's shape), and back a signature_delta
// closing the thinking block; a redacted_thinking block <-> a delta with
// thinking_blocks [{"type":"redacted_thinking","data":...}]. A stream of
// reasoning_content without signatures gives thinking blocks with an empty
// signature. An upstream error event becomes the other
// format's error event and ends the stream; Terminated stays false. The
// converters keep their buffers and encoding/json state from one event to
// the next: a text or arguments delta costs no allocation.
//
// Error bodies (AnthropicErrorToOpenAI, OpenAIErrorToAnthropic) map the
// error types both ways and keep the message; a body that is not an error
// of the expected format still gives a well-formed error.
//
// # Not translated yet
//
// These give an *UnsupportedError naming the field: legacy functions and
// function_call; OpenAI custom tools and allowed_tools choices; Anthropic
// server tools other than web search (code execution, bash, web fetch...)
// and their blocks; audio input and output; images and documents as listed
// above (file_id references, unsupported media types, PDFs by URL); n > 1,
// as Anthropic returns one answer; logprobs and top_logprobs, which
// Anthropic does not give; response_format types other than text,
// json_object and json_schema; MCP servers and containers.
//
// Lossy, as documented above: a temperature above 1 is 1; stop sequences
// of whitespace are dropped; with reasoning_effort, temperature and top_p
// are dropped and a forced tool call is asked for, not forced; an image's
// detail; a plain-text document
// becomes text going to OpenAI; reasoning_effort minimal comes back low,
// and a budget other than 2048, 8192 or 16384 comes back as one of those;
// an unlimited OpenAI request with reasoning comes back with the max_tokens
// that was given to Anthropic; json_schema's strict flag, and a
// response_format json_schema comes back from Anthropic as the
// json_response tool; thinking signatures exist only on Anthropic's side
// (reasoning_content from another provider has none and is not sent to
// Anthropic); redacted thinking has no text, only its data in
// thinking_blocks.
//
// Dropped silently, as they have no counterpart or only tune delivery:
// message names, seed, presence and frequency penalties, logit_bias, store,
// OpenAI metadata, service_tier, prediction, a function's strict flag,
// web search's search_context_size; Anthropic top_k, citations, a tool
// result's is_error, web search's max_uses, and cache_control going to
// OpenAI (which caches prompts by itself).
package translate
