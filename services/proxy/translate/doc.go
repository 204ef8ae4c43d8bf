// Package translate converts between the OpenAI Chat Completions API and the
// Anthropic Messages API — requests, responses, streams and error bodies —
// so that one gateway chain can mix providers of either format.
//
// Text conversations and function tools are translated. Bodies are decoded into
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
//     by a blank line, wherever they stood in the conversation;
//   - user and assistant messages with string content or text parts ->
//     string content or text blocks; consecutive messages of one role are
//     merged into one turn, as Anthropic turns alternate; empty parts are
//     dropped; an assistant refusal is text;
//   - max_completion_tokens, else max_tokens -> max_tokens (4096 when
//     absent: Anthropic requires it); temperature and top_p as they are
//     (Anthropic refuses a temperature above 1); stop (string or array) ->
//     stop_sequences; stream; user -> metadata.user_id;
//   - tools of type function -> tools {name, description, input_schema}
//     (parameters, or an empty object schema when absent; strict is
//     dropped); tool_choice "auto" -> {"type":"auto"}, "required" -> any,
//     {"type":"function","function":{"name":N}} -> {"type":"tool","name":N},
//     "none" -> none; parallel_tool_calls false ->
//     disable_parallel_tool_use (in tool_choice, auto when none was given;
//     tool_choice none cannot carry it). Without tools, tool_choice "none"
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
//   - an assistant's tool_calls -> tool_use blocks after its text, with the
//     arguments parsed as the input (arguments that are not a JSON object
//     are malformed; empty arguments are {}); tool messages -> tool_result
//     blocks of a user turn, merged with the results and user text around
//     them, as Anthropic turns alternate; ids are kept.
//
// Requests, Anthropic -> OpenAI (MessagesToChat):
//   - system (string or text blocks) -> a first system message; text blocks
//     of a message -> string content, joined by a blank line;
//   - max_tokens -> max_tokens (not max_completion_tokens, which OpenAI's
//     reasoning models require); temperature; top_p; stop_sequences -> stop
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
// OpenAI stream produced always ends with a usage chunk ("choices":[]), as if
// stream_options.include_usage had been set. The Anthropic stream produced
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
// These give an *UnsupportedError: legacy functions and function_call; OpenAI custom tools and allowed_tools
// choices; Anthropic server tools (web search, code execution, bash...) and
// their blocks; audio; images and documents as listed above; n > 1; logprobs; response_format other than text (JSON mode,
// structured outputs); web search,
// MCP servers and containers.
//
// Dropped silently, as they have no counterpart or only tune delivery:
// message names, seed, presence and frequency penalties, logit_bias, store,
// OpenAI metadata, service_tier, prediction, a function's strict flag;
// Anthropic top_k, cache_control, citations and a tool result's is_error. Prompt caching hints are therefore
// lost in either direction.
package translate
