package guardrail

import (
	"slices"
	"strings"
	"testing"
)

// found returns the texts of the matches of the built-in in text.
func found(t *testing.T, builtin, text string) []string {
	t.Helper()
	m, err := Compile([]Def{{Name: "g", Builtins: []string{builtin}}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range m.Scan([]byte(text), nil) {
		got = append(got, text[x.Start:x.End])
	}
	if any := m.Any([]byte(text)); any != (len(got) > 0) {
		t.Errorf("Any(%q) = %v, Scan found %q", text, any, got)
	}
	return got
}

// luhn completes prefix with the check digit that makes it pass Luhn's
// check.
func luhn(prefix string) string {
	for c := '0'; c <= '9'; c++ {
		if cardValidLuhn(prefix + string(c)) {
			return prefix + string(c)
		}
	}
	panic("unreachable")
}

func cardValidLuhn(s string) bool {
	sum := 0
	for k := range len(s) {
		v := int(s[len(s)-1-k] - '0')
		if k%2 == 1 {
			if v *= 2; v > 9 {
				v -= 9
			}
		}
		sum += v
	}
	return sum%10 == 0
}

type builtinCase struct {
	name, text string
	want       []string // the matched texts; none for a false positive
}

func runBuiltin(t *testing.T, builtin string, tests []builtinCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := found(t, builtin, tt.text); !slices.Equal(got, tt.want) {
				t.Errorf("%s in %q: got %q, want %q", builtin, tt.text, got, tt.want)
			}
		})
	}
}

func TestEmail(t *testing.T) {
	runBuiltin(t, "email", []builtinCase{
		{"plain", "write to john.doe@example.com today", []string{"john.doe@example.com"}},
		{"plus tag and subdomain", "cc: Jane_Roe+ai@mail.corp.example.co.uk.", []string{"Jane_Roe+ai@mail.corp.example.co.uk"}},
		{"in JSON", `{"content":"my mail is a.b-c%d@x-y.io"}`, []string{"a.b-c%d@x-y.io"}},
		{"angle brackets", "From: Bob <bob@example.org>", []string{"bob@example.org"}},
		{"curly quotes", "“ann@example.net”", []string{"ann@example.net"}},
		{"punycode TLD", "x@example.xn--p1ai", []string{"x@example.xn--p1ai"}},
		{"two addresses", "a@b.com, c@d.org", []string{"a@b.com", "c@d.org"}},
		{"leading dots are punctuation", "...john@example.com", []string{"john@example.com"}},
		{"no domain dot", "user@localhost", nil},
		{"handle", "thanks @handle and @other", nil},
		{"no local part", "@example.com", nil},
		{"one-letter TLD", "a@b.c", nil},
		{"numeric TLD", "name@host.123", nil},
		{"retina image", "icon@2x.png and logo@3x.webp", nil},
		{"double dot", "john..doe@example.com", nil},
		{"trailing dot in local part", "john.@example.com", nil},
		{"hyphen label", "x@-bad.com", nil},
		{"domain runs into alphanumerics", "x@example.c0m", nil},
		{"inside a word", "ünïcodéjohn@example.com", nil},
		{"local part too long", strings.Repeat("a", 65) + "@example.com", nil},
		{"decorator", "@Override public void run()", nil},
	})
}

func TestPhone(t *testing.T) {
	runBuiltin(t, "phone", []builtinCase{
		{"E.164", "call +14155552671 now", []string{"+14155552671"}},
		{"international spaced", "tel: +1 415 555 2671", []string{"+1 415 555 2671"}},
		{"international dashes", "+1-415-555-2671.", []string{"+1-415-555-2671"}},
		{"international parens", "+1 (415) 555-2671", []string{"+1 (415) 555-2671"}},
		{"UK trunk in parens", "+44 (0)20 7946 0958", []string{"+44 (0)20 7946 0958"}},
		{"UK international", "+44 20 7946 0958", []string{"+44 20 7946 0958"}},
		{"France international", "+33 6 12 34 56 78", []string{"+33 6 12 34 56 78"}},
		{"Germany", "+49 30 12345678", []string{"+49 30 12345678"}},
		{"US parens", "(415) 555-2671", []string{"(415) 555-2671"}},
		{"US dashes", "phone: 415-555-2671", []string{"415-555-2671"}},
		{"US dots", "415.555.2671", []string{"415.555.2671"}},
		{"US spaces", "415 555 2671", []string{"415 555 2671"}},
		{"US trunk", "1-800-555-0199", []string{"1-800-555-0199"}},
		{"UK national", "020 7946 0958", []string{"020 7946 0958"}},
		{"German national", "030 12345678", []string{"030 12345678"}},
		{"French national", "06 12 34 56 78", []string{"06 12 34 56 78"}},
		{"Unix timestamp", "ts 1700000000", nil},
		{"millisecond timestamp", "1700000000123", nil},
		{"compact date-time", "20240115103000", nil},
		{"ISO date-time", "2024-01-15 10:30:00", nil},
		{"ISO date", "on 2024-01-15", nil},
		{"order id", "ORD-2024-123456", nil},
		{"plain long number", "order 4155552671 shipped", nil},
		{"IPv4", "host 192.168.10.20", nil},
		{"version", "build 10.0.19041.1", nil},
		{"year range", "2019-2024", nil},
		{"thousands", "1 234 567 890 and 12.345.678", nil},
		{"two groups without trunk", "12345 67890", nil},
		{"short local number", "555-2671", nil},
		{"card number", "4111 1111 1111 1111", nil},
		{"uuid", "123e4567-e89b-12d3-a456-426614174000", nil},
		{"mixed separators", "415-555 2671", nil},
		{"time after", "415 555 2671:30", nil},
		{"inside a word", "x415-555-2671", nil},
		{"arithmetic", "3+14155552671", nil},
	})
}

func TestCardNumber(t *testing.T) {
	runBuiltin(t, "card_number", []builtinCase{
		{"Visa spaced", "card 4111 1111 1111 1111 exp 12/25", []string{"4111 1111 1111 1111"}},
		{"Visa compact", "4111111111111111", []string{"4111111111111111"}},
		{"Visa 13", "4222222222222", []string{"4222222222222"}},
		{"Visa 19 grouped", "4111 1111 1111 1111 110", []string{"4111 1111 1111 1111 110"}},
		{"Mastercard dashes", "5555-5555-5555-4444", []string{"5555-5555-5555-4444"}},
		{"Mastercard 2-series", "2223003122003222", []string{"2223003122003222"}},
		{"Amex 4-6-5", "amex: 3782 822463 10005.", []string{"3782 822463 10005"}},
		{"Diners 4-6-4", "3056 930902 5904", []string{"3056 930902 5904"}},
		{"Discover", `{"pan":"6011111111111117"}`, []string{"6011111111111117"}},
		{"JCB", "3530-1113-3330-0000", []string{"3530-1113-3330-0000"}},
		{"UnionPay", "6200000000000005", []string{"6200000000000005"}},
		{"followed by a CVV group", "4111 1111 1111 1111 1234", []string{"4111 1111 1111 1111"}},
		{"Luhn fails", "4111 1111 1111 1112", nil},
		{"Luhn fails compact", "5555555555554445", nil},
		{"unknown issuer", luhn("123456789012345"), nil},
		{"all zeros", "0000 0000 0000 0000", nil},
		{"millisecond timestamp", "1700000000000", nil},
		{"nanosecond timestamp", luhn("170000000000000000"), nil},
		{"too long a run", "41111111111111111111", nil},
		{"inside a word", "x4111111111111111", nil},
		{"decimal", "0.4111111111111111", nil},
		{"mixed separators", "4111 1111-1111 1111", nil},
		{"bad grouping", "41 11 11 11 11 11 11 11", nil},
		{"inside a chain", "12 4111 1111 1111 1111", nil},
	})
}

func TestIBAN(t *testing.T) {
	runBuiltin(t, "iban", []builtinCase{
		{"Germany spaced", "IBAN: DE89 3704 0044 0532 0130 00.", []string{"DE89 3704 0044 0532 0130 00"}},
		{"Germany compact", "DE89370400440532013000", []string{"DE89370400440532013000"}},
		{"UK letters", "GB82 WEST 1234 5698 7654 32", []string{"GB82 WEST 1234 5698 7654 32"}},
		{"France", "FR14 2004 1010 0505 0001 3M02 606", []string{"FR14 2004 1010 0505 0001 3M02 606"}},
		{"Netherlands", `"NL91ABNA0417164300"`, []string{"NL91ABNA0417164300"}},
		{"Norway shortest", "NO9386011117947", []string{"NO9386011117947"}},
		{"Belgium", "BE68 5390 0754 7034", []string{"BE68 5390 0754 7034"}},
		{"wrong check", "DE89 3704 0044 0532 0130 01", nil},
		{"wrong check digits", "DE88370400440532013000", nil},
		{"too short", "DE89 3704 0044 0532 0130", nil},
		{"too long", "DE8937040044053201300012", nil},
		{"unknown country", "QQ89370400440532013000", nil},
		{"lower-case country", "de89370400440532013000", nil},
		{"bad grouping", "DE89 370 400 440 532 013 000", nil},
		{"inside a word", "XDE89370400440532013000", nil},
	})
}

func TestProviderKey(t *testing.T) {
	runBuiltin(t, "provider_key", []builtinCase{
		{"OpenAI project key", "key sk-proj-abcdefghijklmnop1234 rejected", []string{"sk-proj-abcdefghijklmnop1234"}},
		{"OpenAI legacy", "sk-" + "T3BlbkFJ0123456789abcdefABCDEF0123456789abcdef", []string{"sk-T3BlbkFJ0123456789abcdefABCDEF0123456789abcdef"}},
		{"Anthropic", `"x-api-key: sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_AbCdEfGhIjKl-AA"`, []string{"sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_AbCdEfGhIjKl-AA"}},
		{"Groq", "gsk_0123456789abcdefABCDEF0123456789abcdefABCDEFghij", []string{"gsk_0123456789abcdefABCDEF0123456789abcdefABCDEFghij"}},
		{"xAI", "XAI-0123456789abcdefABCDEF0123456789", []string{"XAI-0123456789abcdefABCDEF0123456789"}},
		{"Stripe-style", "pk_live_51H8abcdefGHIJKLmnopQRST", []string{"pk_live_51H8abcdefGHIJKLmnopQRST"}},
		{"Google", "API key AIzaSyA1234567890abcdefghijklmnopqr not valid", []string{"AIzaSyA1234567890abcdefghijklmnopqr"}},
		{"full stop after", "use sk-proj-abcdefghijklmnop1234.", []string{"sk-proj-abcdefghijklmnop1234"}},
		{"library name", "pip install sk-learn-tutorial", nil},
		{"masked key", "key sk-abc12***********************xyz9 rejected", nil},
		{"short material", "sk-live-0123456789", nil},
		{"inside a word", "task-management-0123456789abcdefABCDEF", nil},
		{"words", "risk_assessment_internationalization", nil},
		{"all lower case piece", "sk-internationalizationx", nil},
		{"bearer is not a key", "Bearer of bad news", nil},
	})
}

const testJWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"

func TestJWT(t *testing.T) {
	runBuiltin(t, "jwt", []builtinCase{
		{"HS256", "token " + testJWT + " expired", []string{testJWT}},
		{"bearer header", "Authorization: Bearer " + testJWT, []string{testJWT}},
		{"in JSON", `{"t":"` + testJWT + `"}`, []string{testJWT}},
		{"alg none, empty signature", "eyJhbGciOiJub25lIn0.eyJzdWIiOiIxIn0.", []string{"eyJhbGciOiJub25lIn0.eyJzdWIiOiIxIn0."}},
		{"encrypted (five segments)", "eyJhbGciOiJSU0EtT0FFUCIsImVuYyI6IkEyNTZHQ00ifQ.OKOawDo13gRp2ojaHV7LFpZcgV7T6DVZKTyKOMTYUmKoTCVJRgckCL9kiMT03JGe.48V1_ALb6US04U3b.5eym8TW_c8SuK0ltJ3rpYIzOeDQz7TALvtu6UG9oMo4vpzs9tX_EFShS8iB7j6ji.XFBoMYUZodetZdvTiFvSkQ", []string{"eyJhbGciOiJSU0EtT0FFUCIsImVuYyI6IkEyNTZHQ00ifQ.OKOawDo13gRp2ojaHV7LFpZcgV7T6DVZKTyKOMTYUmKoTCVJRgckCL9kiMT03JGe.48V1_ALb6US04U3b.5eym8TW_c8SuK0ltJ3rpYIzOeDQz7TALvtu6UG9oMo4vpzs9tX_EFShS8iB7j6ji.XFBoMYUZodetZdvTiFvSkQ"}},
		{"two segments", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0 rejected", nil},
		{"random base64", "c2VjcmV0LWtleS1tYXRlcmlhbA.YmFzZTY0.ZGF0YQ", nil},
		{"header without alg", "eyJ0eXAiOiJKV1QifQ.eyJzdWIiOiIxIn0.c2ln", nil},
		{"header not base64", "eyJ!!.abc.def", nil},
		{"header not JSON", "eyJub3QganNvbg.eyJzdWIiOiIxIn0.c2ln", nil},
		{"inside a run", "xeyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2ln", nil},
		{"dotted identifier", "com.example.eyJ.thing", nil},
	})
}
