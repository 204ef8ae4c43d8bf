package translate

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// Images and documents: OpenAI image_url and file parts <-> Anthropic image
// and document blocks.

// anthropicImageTypes are the media types Anthropic accepts for images.
var anthropicImageTypes = map[string]bool{
	"image/jpeg": true,
	"image/png":  true,
	"image/gif":  true,
	"image/webp": true,
}

// pdfMediaType is the one media type of a base64 document, on both sides.
const pdfMediaType = "application/pdf"

// defaultFilename names a PDF sent to OpenAI from a document without a
// title: OpenAI wants a filename beside file_data.
const defaultFilename = "document.pdf"

// parseDataURL splits "data:<media type>;base64,<data>". ok is false for
// anything else (a data URL that is not base64 included).
func parseDataURL(u string) (mediaType, data string, ok bool) {
	rest, found := strings.CutPrefix(u, "data:")
	if !found {
		return "", "", false
	}
	meta, data, found := strings.Cut(rest, ",")
	if !found {
		return "", "", false
	}
	mediaType, found = strings.CutSuffix(meta, ";base64")
	if !found {
		return "", "", false
	}
	// Parameters such as ";charset=utf-8" before ";base64" are dropped.
	mediaType, _, _ = strings.Cut(mediaType, ";")
	return strings.ToLower(strings.TrimSpace(mediaType)), data, true
}

func dataURL(mediaType, data string) string {
	return "data:" + mediaType + ";base64," + data
}

// imageBlock translates an OpenAI image_url part: a data URL becomes a
// base64 source, an http(s) URL a url source. detail is dropped.
func imageBlock(img *chatImageURL) (anthropicBlock, error) {
	if img == nil || img.URL == "" {
		return anthropicBlock{}, fmt.Errorf("image_url part without a url: %w", ErrMalformed)
	}
	if strings.HasPrefix(img.URL, "data:") {
		mt, data, ok := parseDataURL(img.URL)
		if !ok {
			return anthropicBlock{}, fmt.Errorf("image_url: a data URL that is not data:<media type>;base64,<data>: %w", ErrMalformed)
		}
		if !anthropicImageTypes[mt] {
			return anthropicBlock{}, unsupported(fmt.Sprintf("image media type %q", mt))
		}
		return anthropicBlock{Type: "image", Source: &anthropicSource{Type: "base64", MediaType: mt, Data: data}}, nil
	}
	if !strings.HasPrefix(img.URL, "https://") && !strings.HasPrefix(img.URL, "http://") {
		return anthropicBlock{}, fmt.Errorf("image_url: url is neither http(s) nor a data URL: %w", ErrMalformed)
	}
	return anthropicBlock{Type: "image", Source: &anthropicSource{Type: "url", URL: img.URL}}, nil
}

// documentBlock translates an OpenAI file part: a PDF in file_data becomes
// a base64 document, plain text a text document; the filename is the
// title. A file_id cannot be translated: the file is in OpenAI's storage.
func documentBlock(f *chatFile) (anthropicBlock, error) {
	switch {
	case f == nil:
		return anthropicBlock{}, fmt.Errorf("file part without a file: %w", ErrMalformed)
	case f.FileID != "" && f.FileData == "":
		return anthropicBlock{}, unsupported("file content by file_id")
	case f.FileData == "":
		return anthropicBlock{}, fmt.Errorf("file part without file_data: %w", ErrMalformed)
	}
	mt, data, ok := parseDataURL(f.FileData)
	if !ok {
		return anthropicBlock{}, fmt.Errorf("file.file_data is not a data URL (data:application/pdf;base64,...): %w", ErrMalformed)
	}
	b := anthropicBlock{Type: "document", Title: f.Filename}
	switch mt {
	case pdfMediaType:
		b.Source = &anthropicSource{Type: "base64", MediaType: pdfMediaType, Data: data}
	case "text/plain":
		text, err := base64.StdEncoding.DecodeString(data)
		if err != nil {
			return anthropicBlock{}, fmt.Errorf("file.file_data: %w: %w", ErrMalformed, err)
		}
		b.Source = &anthropicSource{Type: "text", MediaType: "text/plain", Data: string(text)}
	default:
		return anthropicBlock{}, unsupported(fmt.Sprintf("file media type %q", mt))
	}
	return b, nil
}

// chatPartFor translates an Anthropic image or document block into an
// OpenAI content part.
func chatPartFor(b *anthropicBlock) (chatPartOut, error) {
	src := b.Source
	if src == nil {
		return chatPartOut{}, fmt.Errorf("%s block without a source: %w", b.Type, ErrMalformed)
	}
	switch b.Type {
	case "image":
		switch src.Type {
		case "base64":
			if src.MediaType == "" || src.Data == "" {
				return chatPartOut{}, fmt.Errorf("image source without media_type or data: %w", ErrMalformed)
			}
			return chatPartOut{Type: "image_url", ImageURL: &chatImageURL{URL: dataURL(src.MediaType, src.Data)}}, nil
		case "url":
			if src.URL == "" {
				return chatPartOut{}, fmt.Errorf("image source without a url: %w", ErrMalformed)
			}
			return chatPartOut{Type: "image_url", ImageURL: &chatImageURL{URL: src.URL}}, nil
		case "file":
			return chatPartOut{}, unsupported("image content by file_id")
		}
		return chatPartOut{}, unsupported(fmt.Sprintf("image source of type %q", src.Type))
	case "document":
		switch src.Type {
		case "base64":
			if src.MediaType != pdfMediaType {
				return chatPartOut{}, unsupported(fmt.Sprintf("document media type %q", src.MediaType))
			}
			name := b.Title
			if name == "" {
				name = defaultFilename
			}
			return chatPartOut{Type: "file", File: &chatFile{FileData: dataURL(pdfMediaType, src.Data), Filename: name}}, nil
		case "text":
			text := src.Data
			return chatPartOut{Type: "text", Text: &text}, nil
		case "url":
			return chatPartOut{}, unsupported("document content by URL")
		case "file":
			return chatPartOut{}, unsupported("document content by file_id")
		case "content":
			return chatPartOut{}, unsupported("document source of type \"content\"")
		}
		return chatPartOut{}, unsupported(fmt.Sprintf("document source of type %q", src.Type))
	}
	return chatPartOut{}, blockError(b.Type)
}
