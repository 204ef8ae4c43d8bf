package config

import (
	"reflect"
	"sort"
	"strings"
)

// ReloadWarnings says, for each section ReloadChanges names, that its
// change was not applied: what a service logs after a reload.
func ReloadWarnings(cur, next *Config) []string {
	var out []string
	for _, section := range ReloadChanges(cur, next) {
		out = append(out, section+" changed: not applied (restart the service to apply it, or under a fleet routing version change it through the admin API)")
	}
	return out
}

// ReloadChanges names the top-level sections (koanf keys) in which next,
// a configuration re-read from its file (SIGHUP), differs from cur, the
// one a service runs with, beyond what a reload applies: the secrets of
// provider keys and the client keys. A service applies neither section
// named: they take a restart (the routable ones, a routing version
// through the admin API, under a fleet).
func ReloadChanges(cur, next *Config) []string {
	var out []string
	cv, nv := reflect.ValueOf(cur).Elem(), reflect.ValueOf(next).Elem()
	t := cv.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("koanf"), ",")
		if name == "" || name == "-" || name == "clients" {
			continue
		}
		a, b := cv.Field(i).Interface(), nv.Field(i).Interface()
		if name == "providers" {
			a, b = withoutSecrets(cur.Providers), withoutSecrets(next.Providers)
		}
		if !reflect.DeepEqual(a, b) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// withoutSecrets is providers with their keys' resolved secrets left out
// (how a secret is referred to still counts).
func withoutSecrets(ps []Provider) []Provider {
	out := make([]Provider, len(ps))
	for i, p := range ps {
		p.Keys = append([]Key(nil), p.Keys...)
		for j := range p.Keys {
			p.Keys[j].Value = Secret{}
		}
		out[i] = p
	}
	return out
}
