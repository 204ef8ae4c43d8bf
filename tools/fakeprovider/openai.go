package fakeprovider

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"time"
)

// embeddingDim is the default length of an embedding vector.
const embeddingDim = 8

// semanticDim is the least dimension of a "semantic" model's bag of
// words (fewer would hash many words together).
const semanticDim = 256

const fingerprint = "fp_fake0001"

type chatUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func newChatUsage(prompt, completion int) chatUsage {
	return chatUsage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
}

type chatMessage struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      chatMessage     `json:"message"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

type chatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []chatChoice `json:"choices"`
	Usage             chatUsage    `json:"usage"`
	SystemFingerprint string       `json:"system_fingerprint"`
}

type chunkDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chunkChoice struct {
	Index        int             `json:"index"`
	Delta        chunkDelta      `json:"delta"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

type chatChunk struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	Created           int64           `json:"created"`
	Model             string          `json:"model"`
	SystemFingerprint string          `json:"system_fingerprint"`
	Choices           []chunkChoice   `json:"choices"`
	Usage             json.RawMessage `json:"usage,omitempty"`
}

var jsonNull = json.RawMessage("null")

func (s *Server) serveChat(w http.ResponseWriter, req *request, chunks int) {
	s.writeJSON(w, req, chatCompletion{
		ID:      s.newID("chatcmpl-"),
		Object:  "chat.completion",
		Created: time.Now().Unix(),
		Model:   req.call.Model,
		Choices: []chatChoice{{
			Message:      chatMessage{Role: "assistant", Content: req.answerText(chunks)},
			Logprobs:     jsonNull,
			FinishReason: "stop",
		}},
		Usage:             newChatUsage(promptTokens(req.body), 2*chunks),
		SystemFingerprint: fingerprint,
	})
}

// openAIStream is what the OpenAI-format streams share: the writer, the
// stream's id and creation time, and whether the caller asked for usage.
type openAIStream struct {
	s        *Server
	w        http.ResponseWriter
	req      *request
	sse      *sseWriter
	id       string
	created  int64
	usage    bool
	nContent int
}

func (s *Server) newOpenAIStream(w http.ResponseWriter, req *request, idPrefix string) openAIStream {
	return openAIStream{
		s: s, w: w, req: req,
		id:      s.newID(idPrefix),
		created: time.Now().Unix(),
		usage:   req.body.StreamOptions != nil && req.body.StreamOptions.IncludeUsage,
	}
}

func (o *openAIStream) start() error {
	o.sse = o.s.startSSE(o.w, o.req)
	return nil
}

func (o *openAIStream) fail(body []byte) error {
	return o.sse.event("", streamBody(body))
}

// end writes the chunk with finish_reason "stop", then, when the caller
// asked for usage, the usage chunk (usageChunk of the usage of
// promptTokens and the content sent), then [DONE].
func (o *openAIStream) end(stop any, promptTokens int, usageChunk func(json.RawMessage) any) error {
	if err := o.sse.json("", stop); err != nil {
		return err
	}
	if o.usage {
		u, err := json.Marshal(newChatUsage(promptTokens, 2*o.nContent))
		if err != nil {
			return err
		}
		if err := o.sse.json("", usageChunk(u)); err != nil {
			return err
		}
	}
	return o.sse.event("", []byte("[DONE]"))
}

// chatStream writes an OpenAI chat.completion.chunk stream.
type chatStream struct{ openAIStream }

func (s *Server) newChatStream(w http.ResponseWriter, req *request) *chatStream {
	return &chatStream{s.newOpenAIStream(w, req, "chatcmpl-")}
}

func (c *chatStream) chunk(delta chunkDelta, finish *string) chatChunk {
	ch := chatChunk{
		ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: c.req.call.Model,
		SystemFingerprint: fingerprint,
		Choices:           []chunkChoice{{Delta: delta, Logprobs: jsonNull, FinishReason: finish}},
	}
	if c.usage {
		ch.Usage = jsonNull
	}
	return ch
}

func (c *chatStream) start() error {
	c.sse = c.s.startSSE(c.w, c.req)
	if c.req.flavor == flavorAzure {
		// Azure sends the prompt filter results first, in a chunk without choices.
		err := c.sse.event("", []byte(`{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"},"self_harm":{"filtered":false,"severity":"safe"},"sexual":{"filtered":false,"severity":"safe"},"violence":{"filtered":false,"severity":"safe"}}}]}`))
		if err != nil {
			return err
		}
	}
	empty := ""
	return c.sse.json("", c.chunk(chunkDelta{Role: "assistant", Content: &empty}, nil))
}

func (c *chatStream) content(_ int, text string) error {
	c.nContent++
	return c.sse.json("", c.chunk(chunkDelta{Content: &text}, nil))
}

func (c *chatStream) finish() error {
	stop := "stop"
	return c.end(c.chunk(chunkDelta{}, &stop), promptTokens(c.req.body), func(u json.RawMessage) any {
		last := c.chunk(chunkDelta{}, nil)
		last.Choices, last.Usage = []chunkChoice{}, u
		return last
	})
}

type embedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

type embeddingList struct {
	Object string      `json:"object"`
	Data   []embedding `json:"data"`
	Model  string      `json:"model"`
	Usage  struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func (s *Server) serveEmbeddings(w http.ResponseWriter, req *request) {
	inputs, ok := embeddingInputs(req.body.Input)
	if !ok {
		s.writeError(w, req, "openai.bad_request", 0, 0)
		return
	}
	dim := embeddingDim
	if d := req.body.Dimensions; d > 0 && d <= 4096 {
		dim = d
	}
	out := embeddingList{Object: "list", Model: req.call.Model, Data: make([]embedding, len(inputs))}
	tokens := 0
	for i, in := range inputs {
		vec := Embed(in, dim)
		if strings.Contains(req.call.Model, "semantic") {
			vec = EmbedWords(in, max(dim, semanticDim))
		}
		tokens += max(len(strings.Fields(in)), 1)
		var v any = vec
		if req.body.EncodingFormat == "base64" {
			buf := make([]byte, 4*len(vec))
			for j, f := range vec {
				binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(f))
			}
			v = base64.StdEncoding.EncodeToString(buf)
		}
		out.Data[i] = embedding{Object: "embedding", Index: i, Embedding: v}
	}
	out.Usage.PromptTokens, out.Usage.TotalTokens = tokens, tokens
	s.writeJSON(w, req, out)
}

// embeddingInputs reads "input": a string, an array of strings, an array of
// token ids or an array of such arrays (token arrays are embedded by their
// JSON text).
func embeddingInputs(raw json.RawMessage) ([]string, bool) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, true
	}
	var many []json.RawMessage
	if json.Unmarshal(raw, &many) != nil || len(many) == 0 {
		return nil, false
	}
	var tokens []int
	if json.Unmarshal(raw, &tokens) == nil {
		return []string{string(raw)}, true
	}
	out := make([]string, len(many))
	for i, m := range many {
		if json.Unmarshal(m, &out[i]) != nil {
			if json.Unmarshal(m, &tokens) != nil {
				return nil, false
			}
			out[i] = string(m)
		}
	}
	return out, true
}

// Embed returns the fake's embedding of text: dim floats derived from a hash
// of the text, unit length. The same text always gives the same vector.
func Embed(text string, dim int) []float32 {
	vec := make([]float32, dim)
	var norm float64
	for i := range dim {
		h := sha256.Sum256([]byte{byte(i >> 8), byte(i)})
		h = sha256.Sum256(append(h[:], text...))
		v := float64(int32(binary.BigEndian.Uint32(h[:4]))) / math.MaxInt32
		vec[i] = float32(v)
		norm += v * v
	}
	if norm > 0 {
		n := math.Sqrt(norm)
		for i := range vec {
			vec[i] = float32(float64(vec[i]) / n)
		}
	}
	return vec
}

// EmbedWords is the embedding of a model whose name says "semantic": a
// bag of words (lower case, letters and digits), each word hashed to one
// dimension, unit length. Texts with the same words are near (the same
// words in another order, another case or punctuation are identical),
// texts that differ by a word less so: enough for a semantic cache's
// tests.
func EmbedWords(text string, dim int) []float32 {
	vec := make([]float32, dim)
	words := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127)
	})
	seen := map[string]bool{}
	for _, w := range words {
		if seen[w] {
			continue
		}
		seen[w] = true
		h := sha256.Sum256([]byte(w))
		vec[int(binary.BigEndian.Uint32(h[:4])%uint32(dim))] += 1
	}
	var norm float64
	for _, v := range vec {
		norm += float64(v) * float64(v)
	}
	if norm > 0 {
		n := math.Sqrt(norm)
		for i := range vec {
			vec[i] = float32(float64(vec[i]) / n)
		}
	}
	return vec
}

type openAIModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// modelsCreated is the fixed creation time of every listed model.
var modelsCreated = time.Date(2024, 7, 18, 0, 0, 0, 0, time.UTC)

func (s *Server) serveModels(w http.ResponseWriter, req *request) {
	if req.flavor == flavorAnthropic {
		s.serveAnthropicModels(w, req)
		return
	}
	owner, prefix := "system", ""
	if req.flavor == flavorGemini {
		owner, prefix = "google", "models/"
	}
	data := make([]openAIModel, len(s.opts.Models))
	for i, m := range s.opts.Models {
		data[i] = openAIModel{ID: prefix + m, Object: "model", Created: modelsCreated.Unix(), OwnedBy: owner}
	}
	s.writeJSON(w, req, struct {
		Object string        `json:"object"`
		Data   []openAIModel `json:"data"`
	}{"list", data})
}
