// Package guardrail is the pattern engine of guardrails: it finds what a
// request sends upstream, or an answer sends back, that a guardrail
// forbids. Compile turns the pattern part of each guardrail (a Def) into
// one Matcher, once per routing version; Any, Scan and Redact run it over
// a body, and a Window runs it over a stream. Matches carry offsets only,
// never the matched text.
//
// # Built-ins
//
// email: local@domain with a local part of letters, digits and . _ % + -
// (at most 64 characters, no leading, trailing or doubled dot) and a
// domain of at least two labels (letters, digits, inner hyphens) ending in
// an alphabetic top-level label of two or more letters (or punycode
// xn--...); at most 250 bytes in all. Not matched: user@localhost,
// @handle, a@b.c, name@host.123, quoted local parts, IP-literal domains,
// Unicode (IDN) addresses, and image names such as icon@2x.png (a first
// label of digits then x).
//
// phone: a chain of digit groups joined by single spaces, dashes or dots,
// with at most one group in parentheses (first, or after +CC or a trunk
// 1), at most 32 bytes, not inside a word or a longer run of numbers, and
// not followed by ":digit", "/digit" or ",digit" (a time, a date, a list).
// International: a leading + and 8 to 16 digits, the country code (1 to 3
// digits) set off when there are separators: +14155552671,
// +44 20 7946 0958, +44 (0)20 7946 0958, +1 (415) 555-2671. National: no +,
// 9 to 13 digits in two or more groups of two or more digits (a leading
// trunk 1 may stand alone), so at least one separator or parentheses:
// (415) 555-2671, 415-555-2671, 415.555.2671, 020 7946 0958, 06 12 34 56 78,
// 1-800-555-0199. Separators must agree, except next to the parentheses and
// after a country code or a trunk 1. Deliberately not matched: plain runs of
// digits without + (order ids, Unix timestamps, 20240115103000), dates and
// times (2024-01-15 10:30), two-group numbers that do not open with 0 or
// parentheses (2019-2024, 12345 67890), numbers grouped in thousands
// (12 345 678, 1.234.567, and so also 612 345 678), dotted IPv4 addresses,
// version numbers (10.0.19041.1) and national numbers of fewer than 9
// digits.
//
// card_number: 13 to 19 digits in one run, or grouped 4-4-4-4 (with an
// optional fifth group of 1 to 3 digits), 4-6-5 or 4-6-4 with single
// spaces or single dashes (one kind per number); the digits must pass
// Luhn's check and fall in a known issuer range with a length it issues
// (Visa, Mastercard, American Express, Discover, Diners Club, JCB,
// UnionPay, Mir, Maestro). Not matched: numbers failing Luhn, unknown
// ranges (13-digit millisecond timestamps start with 1), numbers inside
// longer runs, words or decimals.
//
// iban: two upper-case letters of a country in the IBAN registry, two
// check digits and the rest of that country's IBAN length, compact
// (DE89370400440532013000) or in groups of four separated by single spaces
// (DE89 3704 0044 0532 0130 00), passing the ISO 7064 mod-97 check. Not
// matched: a wrong check, a wrong length for the country, unknown
// countries, other groupings.
//
// provider_key: the key shapes package redact masks (redact.KeyShape:
// sk-..., sk-ant-..., sk-proj-..., pk/rk, gsk_, xai-, sess-, AIza...),
// with one more condition: a piece of the key between separators
// (- _ . *) has at least 16 characters mixing two of lower case, upper case
// and digits. So "sk-learn-tutorial" and masked keys (sk-abc1****xyz9),
// which leak nothing, are not matched. Bearer tokens (which redact also
// masks) are not a built-in: "bearer of bad news" would match. A key is
// reported as at most its first 256 bytes.
//
// jwt: three base64url segments joined by dots (five for an encrypted
// token), the header starting with eyJ and decoding to a JSON object that
// has an "alg" member (a header longer than 1024 characters is judged by
// its first 1024), a payload of at least two characters, and a signature
// (empty for alg none). Not matched: random base64, dotted identifiers,
// tokens whose header is not JSON naming alg.
//
// # Regex and deny entries
//
// Regex entries are Go (RE2) regular expressions, matched leftmost-first
// as Go's regexp matches them; an expression that can match the empty
// string is refused. Deny entries are words or phrases matched
// ASCII-case-insensitively, where a run of white space in a phrase matches
// any run of ASCII white space, and on word boundaries: an entry that
// starts (ends) with a letter, digit or underscore does not match after
// (before) one, in any script.
//
// # Overlaps and redaction
//
// A pattern's matches are found as that pattern alone finds them. Each
// guardrail then keeps the leftmost-longest of its overlapping matches;
// matches of different guardrails may overlap, so each guardrail's verdict
// is its own. Redact replaces overlapping matches together (so no byte of
// any match survives) with the replacement of the leftmost-longest. The
// default replacement is [REDACTED:<built-in>] or [REDACTED:<guardrail>],
// or [REDACTED] (or nothing) when that would itself match.
//
// # Streams
//
// A Window holds back the largest reach of the compiled patterns: the
// longest match plus what deciding it reads after it (a boundary rune),
// and at most 256 bytes. That is 256 with email, 48 with iban, 38 with
// phone, 29 with card_number, a deny word's length plus 4, a bounded regex's
// longest match plus 4; patterns without a bound (regexes with unbounded
// repetition, deny phrases with spaces, provider keys, JWTs) count as 256.
// While a match of such a pattern touches the end of what has arrived, or
// a JWT is still arriving, the window holds back from that match's start,
// up to 4096 bytes. A match longer than what is held back may be missed or
// reported truncated. It scans 64 bytes of released text before what it
// releases, for look-behind. A Feed costs a scan of what it holds plus the
// chunk (with 16-byte chunks, some 20 times the cost of one Scan of the
// stream).
//
// # Cost
//
// Built-ins and deny entries run in time linear in the text. Each built-in
// first searches for what it needs with bytes.IndexByte or an eight-bytes-
// at-a-time digit test ('@', the J of eyJ, - and _ and z, runs of digits)
// and inspects a bounded neighbourhood of each candidate (each run of key
// characters is judged once). All deny entries of all guardrails run in
// one Aho-Corasick pass that skips to the bytes that can start an entry.
// A regex entry with a required literal of two or more bytes is run only
// when the literal is present. A regex of bounded length whose first bytes
// are rare in text (\d{3}-\d{2}-\d{4}, \bACME-\d{6}\b) is run anchored
// where those bytes occur, falling back to a search when they prove
// common. The other entries are combined into one alternation run first,
// so a text none of them matches costs one pass; Go's regexp has no DFA and
// searches at some 20 to 50 ns a byte, so such entries (\w+@\w+) dominate
// the cost of a matcher: bound them ({1,64} rather than +) to have them
// seeded. Any allocates nothing; Scan allocates nothing when nothing
// matches, nor for built-in and deny matches given room in dst (a regex
// match allocates its offsets, in Go's regexp).
package guardrail
