package jsonfield

// Fields calls fn with the raw key and the raw value of each top-level
// field of the JSON object obj, in order, until fn returns false, and
// reports whether obj is an object: false when it is not, or when it breaks
// off before its closing brace (fn has then seen the fields before the
// fault, the ones Find would find). It does not allocate.
//
// key is the key as written, between its quotes, escapes unresolved
// (Lookup compares names with escapes resolved); value is the value's
// raw JSON. One walk of Fields reads what several calls of Find would, the
// first field of each name being the one Find returns. Once Strict has
// passed on obj, no two top-level keys resolve to the same name, so every
// name is unambiguous.
func Fields(obj []byte, fn func(key, value []byte) bool) bool {
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return false
	}
	for i++; ; {
		ks, ke, vs, ve, st := nextField(obj, i)
		switch st {
		case fieldEnd:
			return true
		case fieldBad:
			return false
		}
		if !fn(obj[ks+1:ke-1], obj[vs:ve]) {
			return true
		}
		i = ve
	}
}

// MaxLookup is the most keys Lookup reads in one walk.
const MaxLookup = 8

// Lookup returns the raw value of the first top-level field of obj named
// by each of keys (the one Find returns; nil when absent), read in one
// walk of Fields that stops once every key is found. A key may appear
// twice in keys (both slots get the value); keys past MaxLookup are not
// read. It does not allocate, but for keys written with escapes (resolved
// to compare them).
func Lookup(obj []byte, keys ...string) (vals [MaxLookup][]byte) {
	keys = keys[:min(len(keys), MaxLookup)]
	left := len(keys)
	Fields(obj, func(k, v []byte) bool {
		for i, key := range keys {
			if vals[i] == nil && keyIs(k, key) {
				vals[i] = v
				left--
			}
		}
		return left > 0
	})
	return vals
}

const (
	fieldOK  = iota // a field
	fieldEnd        // the object's closing brace
	fieldBad        // not a well-formed field
)

// nextField scans the field at or after obj[i] (past whitespace and
// commas, which it tolerates as find does): ks and ke bound its quoted key,
// vs and ve its value.
func nextField(obj []byte, i int) (ks, ke, vs, ve, st int) {
	for {
		i = skipWS(obj, i)
		if i >= len(obj) {
			return 0, 0, 0, 0, fieldBad
		}
		switch obj[i] {
		case '}':
			return 0, 0, 0, 0, fieldEnd
		case ',':
			i++
			continue
		case '"':
		default:
			return 0, 0, 0, 0, fieldBad
		}
		ks = i
		if ke = skipString(obj, i); ke < 0 {
			return 0, 0, 0, 0, fieldBad
		}
		i = skipWS(obj, ke)
		if i >= len(obj) || obj[i] != ':' {
			return 0, 0, 0, 0, fieldBad
		}
		vs = skipWS(obj, i+1)
		if ve = skipValue(obj, vs); ve < 0 {
			return 0, 0, 0, 0, fieldBad
		}
		return ks, ke, vs, ve, fieldOK
	}
}

// StringValue returns the raw JSON value v when it is a string, escapes
// resolved as String resolves them, and whether it was one. It allocates
// the string only.
func StringValue(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	return string(canonical(v[1 : len(v)-1])), true
}

// An Edit is a change Rewrite makes to one top-level field.
type Edit struct {
	key  string
	kind uint8
	s    string // the string value (editString), the member (editMember)
	raw  []byte // the raw value (editRaw, editMember)
}

const (
	editRaw = iota
	editString
	editMember
)

// EditRaw sets the field key to raw, a valid JSON value, as SetRaw does.
func EditRaw(key string, raw []byte) Edit { return Edit{key: key, kind: editRaw, raw: raw} }

// EditString sets the field key to the JSON string s, as SetString does.
func EditString(key, s string) Edit { return Edit{key: key, kind: editString, s: s} }

// EditMember sets the member member of the object field key to raw, a
// valid JSON value, as SetRaw(obj, key, SetRaw(value, member, raw)) does:
// a field that is absent or not an object becomes {member: raw}.
func EditMember(key, member string, raw []byte) Edit {
	return Edit{key: key, kind: editMember, s: member, raw: raw}
}

// appendValue appends the field's new value, given its current one (nil
// when absent).
func (e *Edit) appendValue(dst, old []byte) []byte {
	switch e.kind {
	case editString:
		return appendQuoted(dst, e.s)
	case editMember:
		if len(old) == 0 || old[0] != '{' {
			old = emptyObject
		}
		return set(dst, old, e.s, "", e.raw, false)
	}
	return append(dst, e.raw...)
}

var emptyObject = []byte("{}")

// maxEdits is the most edits Rewrite applies in one pass; more take a pass
// per maxEdits.
const maxEdits = 8

// Rewrite appends to dst the JSON object obj with the edits applied, in
// one walk of obj and one copy: for valid JSON, the same bytes as applying
// them one after another with SetRaw and SetString (a field present is replaced where it
// stands, its first occurrence; one absent is inserted first, so absent
// fields end up in the reverse order of edits). The edits must name
// distinct keys. obj is copied unchanged when it is not an object.
func Rewrite(dst, obj []byte, edits ...Edit) []byte {
	for len(edits) > maxEdits {
		obj, edits = rewrite(nil, obj, edits[:maxEdits]), edits[maxEdits:]
	}
	return rewrite(dst, obj, edits)
}

// rewrite is Rewrite of at most maxEdits edits.
func rewrite(dst, obj []byte, edits []Edit) []byte {
	open := skipWS(obj, 0)
	if open >= len(obj) || obj[open] != '{' {
		return append(dst, obj...)
	}
	// The value span of each edit's field (start -1: absent).
	var span [maxEdits][2]int
	for k := range edits {
		span[k][0] = -1
	}
	missing := len(edits)
	for i := open + 1; missing > 0; {
		ks, ke, vs, ve, st := nextField(obj, i)
		if st != fieldOK {
			break
		}
		raw := obj[ks+1 : ke-1]
		for k := range edits {
			if span[k][0] < 0 && keyIs(raw, edits[k].key) {
				span[k] = [2]int{vs, ve}
				missing--
				break
			}
		}
		i = ve
	}

	dst = append(dst, obj[:open+1]...)
	if missing > 0 {
		for k := len(edits) - 1; k >= 0; k-- {
			if span[k][0] >= 0 {
				continue
			}
			dst = appendQuoted(dst, edits[k].key)
			dst = append(dst, ':')
			dst = edits[k].appendValue(dst, nil)
			dst = append(dst, ',')
		}
		if j := skipWS(obj, open+1); j >= len(obj) || obj[j] == '}' {
			dst = dst[:len(dst)-1] // nothing follows: no comma
		}
	}
	// The fields present, in the order they stand.
	at := open + 1
	for done := 0; done < len(edits)-missing; done++ {
		next := -1
		for k := range edits {
			if s := span[k][0]; s >= at && (next < 0 || s < span[next][0]) {
				next = k
			}
		}
		dst = append(dst, obj[at:span[next][0]]...)
		dst = edits[next].appendValue(dst, obj[span[next][0]:span[next][1]])
		at = span[next][1]
	}
	return append(dst, obj[at:]...)
}
