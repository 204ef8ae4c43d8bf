package guardrail

// The built-ins made of digits: phone, card_number, iban.

import "encoding/binary"

// nextDigit returns the index of the first digit at or after i, or
// len(text). It skips eight bytes at a time while they hold no digit.
func nextDigit(text []byte, i int) int {
	for ; i+8 <= len(text); i += 8 {
		if hasDigit8(binary.LittleEndian.Uint64(text[i:])) {
			break
		}
	}
	for i < len(text) && !isDigit(text[i]) {
		i++
	}
	return i
}

// hasDigit8 reports whether one of the eight bytes of x is an ASCII digit
// ("hasbetween" of the bit twiddling hacks: exact, with no carry between
// bytes).
func hasDigit8(x uint64) bool {
	const ones = 0x0101010101010101
	t := x & (ones * 127)
	return (ones*(127+'9'+1)-t)&^x&(t+ones*(127-('0'-1)))&(ones*128) != 0
}

// skipDigits returns the index of the first non-digit at or after i.
func skipDigits(text []byte, i int) int {
	for i < len(text) && isDigit(text[i]) {
		i++
	}
	return i
}

// ---- phone ----

const (
	maxPhoneBytes = 32 // a longer chain of digit groups is not a phone number
	maxGroups     = 8
)

func isPhoneSep(c byte) bool { return c == ' ' || c == '-' || c == '.' }

// phoneChain is a run of digit groups joined by single separators.
type phoneChain struct {
	plus   bool // starts with +: the first group is the country code
	n      int  // groups
	paren  int  // index of the group in parentheses, or -1
	digits int
	size   [maxGroups]int
	sep    [maxGroups]byte // separator before each group (0: none)
	first  byte            // first digit of the first group
}

// findPhone tries each run of digits: a number starts with it, or with the
// + or ( right before it.
func findPhone(text []byte, from int) (int, int) {
	for i := nextDigit(text, from); i < len(text); i = nextDigit(text, skipDigits(text, i)) {
		s := i
		if s > from && (text[s-1] == '+' || text[s-1] == '(') {
			s--
		}
		if phoneStart(text, s) {
			if e := phoneAt(text, s); e > 0 {
				return s, e
			}
		}
	}
	return -1, -1
}

// phoneStart reports whether a number may start at text[i]: not inside a
// word, a number, or a chain of digit groups.
func phoneStart(text []byte, i int) bool {
	if i == 0 {
		return true
	}
	p := text[i-1]
	if wordBefore(text, i) || p == '+' || p == '-' || p == '.' || p == '/' || p == ',' {
		return false
	}
	return !(p == ' ' && i >= 2 && (isDigit(text[i-2]) || text[i-2] == ')'))
}

// phoneAt parses the chain at text[i] and returns its end when it is a
// phone number (phoneValid), or 0.
func phoneAt(text []byte, i int) int {
	var ch phoneChain
	ch.paren = -1
	p := i
	if text[p] == '+' {
		ch.plus = true
		p++
		if p >= len(text) || !isDigit(text[p]) {
			return 0
		}
	}
	for {
		if p-i > maxPhoneBytes || ch.n == maxGroups {
			return 0
		}
		q := p
		if text[p] == '(' {
			if ch.paren >= 0 || ch.n > 1 || ch.n == 1 && !ch.plus && !(ch.size[0] == 1 && ch.first == '1') {
				return 0
			}
			q = p + 1
		}
		d := q
		for d < len(text) && isDigit(text[d]) {
			d++
		}
		if d == q {
			return 0
		}
		if text[p] == '(' {
			if d >= len(text) || text[d] != ')' {
				return 0
			}
			ch.paren = ch.n
			d++
		}
		if ch.n == 0 {
			ch.first = text[q]
		}
		ch.size[ch.n] = d - q
		ch.digits += d - q
		ch.n++
		p = d
		// The chain goes on over one separator before a digit or '(', or
		// straight on after a group in parentheses.
		if p+1 < len(text) && isPhoneSep(text[p]) && (isDigit(text[p+1]) || text[p+1] == '(') {
			if ch.n < maxGroups {
				ch.sep[ch.n] = text[p]
			}
			p++
			continue
		}
		if ch.paren == ch.n-1 && p < len(text) && (isDigit(text[p]) || text[p] == '(') {
			continue
		}
		break
	}
	if p-i > maxPhoneBytes || wordAfter(text, p) {
		return 0
	}
	// A time (10:30), a date (15/01) or a list of numbers goes on.
	if p+1 < len(text) && (text[p] == ':' || text[p] == '/' || text[p] == ',') && isDigit(text[p+1]) {
		return 0
	}
	if !ch.valid() {
		return 0
	}
	return p
}

// valid applies the phone rules (see the package documentation).
func (ch *phoneChain) valid() bool {
	// Separators must agree, except next to the group in parentheses and
	// after a country code or a leading trunk 1.
	free := func(k int) bool {
		return k == ch.paren || k == ch.paren+1 && ch.paren >= 0 ||
			k == 1 && (ch.plus || ch.size[0] == 1 && ch.first == '1')
	}
	var sep byte
	for k := 1; k < ch.n; k++ {
		if free(k) || ch.sep[k] == 0 {
			continue
		}
		if sep != 0 && ch.sep[k] != sep {
			return false
		}
		sep = ch.sep[k]
	}
	if ch.plus {
		return ch.digits >= 8 && ch.digits <= 16 && (ch.n == 1 || ch.size[0] <= 3)
	}
	if ch.digits < 9 || ch.digits > 13 || ch.n < 2 {
		return false
	}
	for k := 0; k < ch.n; k++ {
		if ch.size[k] < 2 && !(k == 0 && ch.first == '1' && ch.n >= 3) {
			return false
		}
	}
	if ch.n == 2 && ch.paren != 0 && ch.first != '0' {
		return false // "12345 67890", "2019-2024": only 0 or (area) opens a two-group number
	}
	if ch.paren < 0 && ch.size[0] <= 3 && ch.n >= 3 {
		thousands := true
		for k := 1; k < ch.n; k++ {
			thousands = thousands && ch.size[k] == 3
		}
		if thousands {
			return false // 12 345 678, 1.234.567
		}
	}
	if sep == '.' && ch.n == 4 && ch.size[0] <= 3 && ch.size[1] <= 3 && ch.size[2] <= 3 && ch.size[3] <= 3 {
		return false // an IPv4 address
	}
	return true
}

// ---- card_number ----

const maxCardBytes = 19 + 4 // 19 digits and separators

func findCard(text []byte, from int) (int, int) {
	for i := nextDigit(text, from); i < len(text); i = nextDigit(text, i) {
		if cardStart(text, i) {
			if e := cardAt(text, i); e > 0 {
				return i, e
			}
		}
		i = skipDigits(text, i)
	}
	return -1, -1
}

// cardStart reports whether a card number may start at text[i]: not inside
// a word, a decimal or a chain of digit groups.
func cardStart(text []byte, i int) bool {
	if i == 0 {
		return true
	}
	if wordBefore(text, i) {
		return false
	}
	p := text[i-1]
	return !((p == ' ' || p == '-' || p == '.' || p == ',') && i >= 2 && isDigit(text[i-2]))
}

// cardEnd reports whether a card number may end at text[e]: not inside a
// word or a decimal.
func cardEnd(text []byte, e int) bool {
	if wordAfter(text, e) {
		return false
	}
	return !(e+1 < len(text) && (text[e] == '.' || text[e] == ',') && isDigit(text[e+1]))
}

// cardAt returns the end of the card number starting at text[i], or 0:
// 13 to 19 digits in one run, or in groups 4-4-4-4 (and a fifth of up to
// three), 4-6-5 or 4-6-4 joined by single spaces or dashes, passing Luhn's
// check and of a length its issuer range uses.
func cardAt(text []byte, i int) int {
	run := 0
	for i+run < len(text) && isDigit(text[i+run]) {
		run++
	}
	var digits [19]byte
	if run >= 13 && run <= 19 {
		copy(digits[:], text[i:i+run])
		if cardEnd(text, i+run) && cardValid(digits[:run]) {
			return i + run
		}
		return 0
	}
	if run != 4 || i+4 >= len(text) || text[i+4] != ' ' && text[i+4] != '-' {
		return 0
	}
	sep := text[i+4]
	// group returns the end of a group of n digits after sep at p, or 0.
	group := func(p, lo, hi int) (int, int) {
		if p >= len(text) || text[p] != sep {
			return 0, 0
		}
		q := p + 1
		for q < len(text) && q-p-1 < hi && isDigit(text[q]) {
			q++
		}
		if n := q - p - 1; n >= lo && (q >= len(text) || !isDigit(text[q])) {
			return q, n
		}
		return 0, 0
	}
	for _, l := range cardLayouts {
		p, n := i+4, 4
		copy(digits[:], text[i:i+4])
		for k, size := range l {
			lo := size
			if k == 3 {
				lo = 1 // the fifth group of a 19-digit number: 1 to 3 digits
			}
			q, got := group(p, lo, size)
			if q == 0 {
				p = 0
				break
			}
			copy(digits[n:], text[q-got:q])
			n += got
			p = q
		}
		if p > 0 && cardEnd(text, p) && cardValid(digits[:n]) {
			return p
		}
	}
	return 0
}

// cardLayouts are the groups that may follow a first group of four: the
// fifth group of 4-4-4-4-x has 1 to 3 digits.
var cardLayouts = [][]int{{4, 4, 4, 3}, {4, 4, 4}, {6, 5}, {6, 4}}

// cardValid applies Luhn's check and the issuer ranges to digits.
func cardValid(d []byte) bool {
	sum := 0
	for k := range d {
		v := int(d[len(d)-1-k] - '0')
		if k%2 == 1 {
			v *= 2
			if v > 9 {
				v -= 9
			}
		}
		sum += v
	}
	if sum%10 != 0 {
		return false
	}
	for _, r := range issuers {
		v := 0
		for _, c := range d[:r.digits] {
			v = v*10 + int(c-'0')
		}
		if v >= r.lo && v <= r.hi && r.lens&(1<<len(d)) != 0 {
			return true
		}
	}
	return false
}

// lens returns the bit set of the given lengths.
func lens(ns ...int) uint32 {
	var m uint32
	for _, n := range ns {
		m |= 1 << n
	}
	return m
}

var lens16to19 = lens(16, 17, 18, 19)

// issuers are the card issuer (IIN) ranges and the lengths they issue.
var issuers = []struct {
	lo, hi, digits int
	lens           uint32
}{
	{4, 4, 1, lens(13, 16, 19)},                   // Visa
	{51, 55, 2, lens(16)},                         // Mastercard
	{2221, 2720, 4, lens(16)},                     // Mastercard 2-series
	{34, 34, 2, lens(15)},                         // American Express
	{37, 37, 2, lens(15)},                         // American Express
	{6011, 6011, 4, lens16to19},                   // Discover
	{644, 649, 3, lens16to19},                     // Discover
	{65, 65, 2, lens16to19},                       // Discover, RuPay
	{300, 305, 3, lens(14, 15, 16, 17, 18, 19)},   // Diners Club
	{36, 36, 2, lens(14, 15, 16, 17, 18, 19)},     // Diners Club
	{38, 39, 2, lens(14, 15, 16, 17, 18, 19)},     // Diners Club
	{3528, 3589, 4, lens16to19},                   // JCB
	{62, 62, 2, lens16to19},                       // UnionPay
	{2200, 2204, 4, lens16to19},                   // Mir
	{50, 50, 2, lens(13, 14, 15, 16, 17, 18, 19)}, // Maestro, Verve
	{56, 69, 2, lens(13, 14, 15, 16, 17, 18, 19)}, // Maestro and others
	{81, 82, 2, lens16to19},                       // UnionPay, RuPay
}

// ---- iban ----

const maxIBANBytes = 34 + 8 // 34 characters in groups of four

// ibanLengths is the IBAN length of each country (ISO 13616 registry).
const ibanLengths = "AD24AE23AL28AT20AZ28BA20BE16BG22BH22BI27BR29BY28CH21CR22CY28CZ24" +
	"DE22DJ27DK18DO28EE20EG29ES24FI18FK18FO18FR27GB22GE22GI23GL18GR27GT28HN28HR21" +
	"HU28IE22IL23IQ23IS26IT27JO30KW30KZ20LB28LC32LI21LT20LU20LV21LY25MC27MD24ME22" +
	"MK19MN20MR27MT31MU30NI28NL18NO15OM23PK24PL28PS29PT25QA29RO24RS22RU33SA24SC31" +
	"SD18SE24SI19SK24SM27SO23ST25SV28TL23TN24TR26UA29VA22VG24XK20YE30"

// ibanLength returns the IBAN length of the country a, b (upper-case
// letters), or 0.
func ibanLength(a, b byte) int {
	for k := 0; k+4 <= len(ibanLengths); k += 4 {
		if ibanLengths[k] == a && ibanLengths[k+1] == b {
			return int(ibanLengths[k+2]-'0')*10 + int(ibanLengths[k+3]-'0')
		}
	}
	return 0
}

func isUpper(c byte) bool { return c-'A' < 26 }

func findIBAN(text []byte, from int) (int, int) {
	for j := nextDigit(text, from+2); j+1 < len(text); j = nextDigit(text, skipDigits(text, j)) {
		s := j - 2
		if !isUpper(text[s]) || !isUpper(text[s+1]) || !isDigit(text[j+1]) || wordBefore(text, s) {
			continue
		}
		if e := ibanAt(text, s); e > 0 {
			return s, e
		}
	}
	return -1, -1
}

// ibanAt returns the end of the IBAN starting at text[s], or 0: a country's
// length of characters, compact or in groups of four, passing the mod-97
// check.
func ibanAt(text []byte, s int) int {
	n := ibanLength(text[s], text[s+1])
	if n == 0 {
		return 0
	}
	var chars [34]byte
	copy(chars[:4], text[s:s+4])
	got, p := 4, s+4
	spaced := p < len(text) && text[p] == ' '
	for got < n {
		if spaced {
			if p >= len(text) || text[p] != ' ' {
				return 0
			}
			p++
		}
		size := n - got
		if spaced {
			size = min(size, 4)
		}
		if p+size > len(text) {
			return 0
		}
		for _, c := range text[p : p+size] {
			if !isAlnum(c) {
				return 0
			}
			chars[got] = c
			got++
		}
		p += size
	}
	if wordAfter(text, p) || !mod97(chars[:n]) {
		return 0
	}
	return p
}

// mod97 applies ISO 7064's check: the country and check digits moved to
// the end, letters as 10 to 35, the number mod 97 is 1.
func mod97(iban []byte) bool {
	r := 0
	for k := range iban {
		c := iban[(k+4)%len(iban)]
		switch {
		case isDigit(c):
			r = (r*10 + int(c-'0')) % 97
		case isLetter(c):
			r = (r*100 + int(c|0x20-'a') + 10) % 97
		default:
			return false
		}
	}
	return r == 1
}
