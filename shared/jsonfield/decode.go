package jsonfield

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
)

// ErrTrailing is DecodeStrict's error for a body with something after its
// value.
var ErrTrailing = errors.New("trailing data after the object")

// DecodeStrict decodes body into v, a pointer to a struct, as strictly as
// the gateway's operator APIs read their input: a field v does not have,
// a key named twice in one object (*DuplicateKeyError), at the top level
// two spellings of one of v's fields ({"status":1,"Status":2}:
// encoding/json takes the last, case-insensitively), and anything after
// the value (ErrTrailing), and a string that is not valid UTF-8 as
// written (*NotUTF8Error: encoding/json would replace the bad bytes
// silently) are errors. The decoder's own errors are returned as they
// are.
func DecodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := Strict(body, FieldNames(reflect.TypeOf(v))); err != nil {
		if errors.Is(err, ErrInvalid) { // the value decoded: what follows it is not JSON
			return ErrTrailing
		}
		return err
	}
	return CheckUTF8(body)
}

// FieldNames are the JSON names of the fields of struct type t (through a
// pointer), those of embedded structs included.
func FieldNames(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var names []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported() && !f.Anonymous:
		case f.Anonymous && name == "":
			names = append(names, FieldNames(f.Type)...)
		case name == "":
			names = append(names, f.Name)
		default:
			names = append(names, name)
		}
	}
	return names
}
