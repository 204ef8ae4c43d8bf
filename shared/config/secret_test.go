package config

import "testing"

// TestFileSecrets: a key's file secret is a change the first time and
// when it differs from the one the file gave last, not when it is the
// same.
func TestFileSecrets(t *testing.T) {
	var f FileSecrets
	f.NoteAll(&Config{Providers: []Provider{{Name: "p", Keys: []Key{{ID: "k", Value: NewSecret("a")}}}}})
	for i, c := range []struct {
		key, secret string
		want        bool
	}{
		{"k", "a", false}, {"k", "b", true}, {"k", "b", false}, {"new", "x", true}, {"new", "x", false},
	} {
		if got := f.Changed("p", c.key, NewSecret(c.secret)); got != c.want {
			t.Errorf("step %d: Changed(%s, %s) = %v, want %v", i, c.key, c.secret, got, c.want)
		}
	}
}
