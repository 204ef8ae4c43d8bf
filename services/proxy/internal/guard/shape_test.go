package guard

import (
	"reflect"
	"strings"
	"testing"
)

func TestShape(t *testing.T) {
	img := strings.Repeat("A", 3000)
	cases := []struct {
		name              string
		f                 Format
		body              string
		msgs, att, larges int
		tools             []string
		sets              string
	}{
		{"chat", Chat, `{"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + img + `"}},
			{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]},{"role":"assistant","content":"y"}],
			"tools":[{"type":"function","function":{"name":"get_weather","parameters":{}}}],"logit_bias":{"1":2}}`,
			2, 2, len("data:image/png;base64,") + 3000, []string{"get_weather"}, "logit_bias"},
		{"messages", Messages, `{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"QUJD"}},
			{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"` + img + `"}}]}],
			"tools":[{"name":"search","input_schema":{}},{"type":"web_search_20250305","name":"web_search"}]}`,
			1, 2, 3000, []string{"search", "web_search"}, ""},
		{"responses", Responses, `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/jpeg;base64,QUJD"}]}],
			"tools":[{"type":"function","name":"f"},{"type":"web_search"}]}`,
			1, 1, len("data:image/jpeg;base64,QUJD"), []string{"f", "web_search"}, ""},
		{"responses, a string", Responses, `{"input":"hi"}`, 1, 0, 0, nil, ""},
	}
	for _, c := range cases {
		sh := ShapeOf([]byte(c.body), c.f)
		var tools []string
		sh.Tools(func(n []byte) { tools = append(tools, string(n)) })
		if sh.Messages != c.msgs || sh.Attachments != c.att || sh.LargestAttachment != c.larges || !reflect.DeepEqual(tools, c.tools) {
			t.Errorf("%s: %d messages, %d attachments (largest %d), tools %q; want %d, %d (%d), %q",
				c.name, sh.Messages, sh.Attachments, sh.LargestAttachment, tools, c.msgs, c.att, c.larges, c.tools)
		}
		if c.sets != "" && !sh.Sets(c.sets) || sh.Sets("nope") {
			t.Errorf("%s: Sets", c.name)
		}
	}
}
