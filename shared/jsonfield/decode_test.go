package jsonfield

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

type embedded struct {
	Inner string `json:"inner"`
}

type decodeTarget struct {
	embedded
	Status  *int   `json:"status"`
	Body    string `json:"body,omitempty"`
	Plain   bool
	Skipped string `json:"-"`
	hidden  string //nolint:unused // not a JSON field
}

// FieldNames: the JSON names a decoder matches, embedded structs' too.
func TestFieldNames(t *testing.T) {
	want := []string{"inner", "status", "body", "Plain"}
	if got := FieldNames(reflect.TypeFor[*decodeTarget]()); !slices.Equal(got, want) {
		t.Fatalf("FieldNames = %v, want %v", got, want)
	}
}

// DecodeStrict refuses what encoding/json lets through: an unknown field,
// a key twice, two spellings of a field, something after the value.
func TestDecodeStrict(t *testing.T) {
	var v decodeTarget
	if err := DecodeStrict([]byte(`{"status":429,"body":"x","inner":"i"}`), &v); err != nil || *v.Status != 429 || v.Inner != "i" {
		t.Fatalf("a good body: %+v %v", v, err)
	}
	var dk *DuplicateKeyError
	for body, ok := range map[string]func(error) bool{
		`{"statuz":1}`:              func(err error) bool { return err != nil },
		`{"status":1,"status":2}`:   func(err error) bool { return errors.As(err, &dk) },
		`{"status":1,"Status":2}`:   func(err error) bool { return errors.As(err, &dk) },
		`{"status":1} {"status":2}`: func(err error) bool { return errors.Is(err, ErrTrailing) },
		`{"status":1} x`:            func(err error) bool { return errors.Is(err, ErrTrailing) },
		`{"inner":"a","INNER":"b"}`: func(err error) bool { return errors.As(err, &dk) },
	} {
		var v decodeTarget
		if err := DecodeStrict([]byte(body), &v); !ok(err) {
			t.Errorf("%s: %v", body, err)
		}
	}
}
