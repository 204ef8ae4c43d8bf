package jsonfield

import (
	"errors"
	"testing"
)

func TestCheckUTF8(t *testing.T) {
	for _, tt := range []struct {
		name, body, path string
		ok               bool
	}{
		{name: "valid", body: `{"a":"héllo","b":[1,"✓"]}`, ok: true},
		{name: "lone surrogate escape is valid JSON", body: `{"a":"\udc00"}`, ok: true},
		{name: "message content", body: "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\xff\"}]}", path: "messages[0].content"},
		{name: "nested arrays", body: "{\"m\":[[1,2],[\"ok\",{\"k\":\"\xc3\"}]]}", path: "m[1][1].k"},
		{name: "after an object", body: "{\"a\":{\"b\":\"x\"},\"c\":[\"y\",\"\xfe\"]}", path: "c[1]"},
		{name: "truncated sequence", body: "{\"reason\":\"caf\xc3\"}", path: "reason"},
		{name: "top-level string", body: "\"\xff\"", path: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckUTF8([]byte(tt.body))
			if tt.ok {
				if err != nil {
					t.Fatalf("CheckUTF8: %v", err)
				}
				return
			}
			var ne *NotUTF8Error
			if !errors.As(err, &ne) || ne.Path != tt.path {
				t.Fatalf("CheckUTF8 = %v, want the path %q", err, tt.path)
			}
		})
	}
	valid := []byte(`{"messages":[{"role":"user","content":"héllo"}]}`)
	if n := testing.AllocsPerRun(100, func() { _ = CheckUTF8(valid) }); n != 0 {
		t.Errorf("CheckUTF8 of a valid body allocates %v times", n)
	}
}
