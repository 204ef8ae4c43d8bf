package fakeprovider

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"strings"
	"time"
)

// OpenAI image generations (POST /v1/images/generations).

// fakePNG is the image every generation returns: a valid 2x2 PNG.
var fakePNG = func() []byte {
	img := image.NewRGBA(image.Rect(0, 0, 2, 2))
	img.Set(0, 0, color.RGBA{R: 0xff, A: 0xff})
	img.Set(1, 0, color.RGBA{G: 0xff, A: 0xff})
	img.Set(0, 1, color.RGBA{B: 0xff, A: 0xff})
	img.Set(1, 1, color.RGBA{R: 0xff, G: 0xff, B: 0xff, A: 0xff})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		panic(err)
	}
	return b.Bytes()
}()

// maxImages bounds "n".
const maxImages = 10

type generatedImage struct {
	B64JSON       string `json:"b64_json,omitempty"`
	URL           string `json:"url,omitempty"`
	RevisedPrompt string `json:"revised_prompt,omitempty"`
}

type imagesUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		TextTokens  int `json:"text_tokens"`
		ImageTokens int `json:"image_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens int `json:"output_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

type imagesResponse struct {
	Created      int64            `json:"created"`
	Background   string           `json:"background,omitempty"`
	Data         []generatedImage `json:"data"`
	OutputFormat string           `json:"output_format,omitempty"`
	Quality      string           `json:"quality,omitempty"`
	Size         string           `json:"size,omitempty"`
	Usage        imagesUsage      `json:"usage"`
}

// imageOutputTokens is what one generated image costs (gpt-image-1, low
// quality, 1024x1024).
const imageOutputTokens = 272

// imageCount is the images a generation answers: "n", 1 to maxImages.
func imageCount(b reqBody) int {
	if b.N <= 0 {
		return 1
	}
	return min(b.N, maxImages)
}

// imagePromptTokens counts the words of the prompt, at least 1.
func imagePromptTokens(b reqBody) int {
	var prompt string
	_ = json.Unmarshal(b.Prompt, &prompt)
	return max(len(strings.Fields(prompt)), 1)
}

// imagesTokens is the usage of a generation: its prompt tokens and
// imageOutputTokens per image.
func imagesTokens(b reqBody) int { return imagePromptTokens(b) + imageCount(b)*imageOutputTokens }

func (s *Server) serveImages(w http.ResponseWriter, req *request) {
	n := imageCount(req.body)
	dalle := strings.HasPrefix(req.call.Model, "dall-e")
	// dall-e models answer URLs unless asked for b64_json; gpt-image models
	// always answer b64_json.
	asURL := req.body.responseFormat() == "url" || (dalle && req.body.responseFormat() == "")
	var prompt string
	_ = json.Unmarshal(req.body.Prompt, &prompt)
	out := imagesResponse{Created: time.Now().Unix(), Data: make([]generatedImage, n)}
	if !dalle {
		out.Background, out.OutputFormat, out.Quality, out.Size = "opaque", "png", "low", "1024x1024"
	}
	for i := range out.Data {
		if asURL {
			out.Data[i].URL = "http://" + req.r.Host + "/_fake/images/" + s.newID("img-") + ".png"
		} else {
			out.Data[i].B64JSON = base64.StdEncoding.EncodeToString(fakePNG)
		}
		if req.call.Model == "dall-e-3" {
			out.Data[i].RevisedPrompt = prompt
		}
	}
	text := imagePromptTokens(req.body)
	out.Usage.InputTokens = text
	out.Usage.InputTokensDetails.TextTokens = text
	out.Usage.OutputTokens = n * imageOutputTokens
	out.Usage.TotalTokens = out.Usage.InputTokens + out.Usage.OutputTokens
	s.writeJSON(w, req, out)
}
