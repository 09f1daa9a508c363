package tokenizer

import (
	"html"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// This file reproduces, in Go, the text handling that OpenAI's
// simple_tokenizer.py applies before BPE:
//
//	text = whitespace_clean(basic_clean(text)).lower()
//	for token in re.findall(pat, text): ...
//
// where basic_clean is ftfy.fix_text (not applied here, see the package
// documentation), html.unescape twice and strip; whitespace_clean replaces
// every run of `\s` (Python's str.isspace) with one space and strips; lower is
// Python's str.lower; pat is the case-insensitive pre-tokenizer regex of the
// `regex` module. Each step follows Python's semantics where Go's standard
// library differs (see the comments on each function).

// cleanText returns the text exactly as simple_tokenizer.py feeds it to the
// pre-tokenizer (minus ftfy): invalid UTF-8 replaced, HTML-unescaped twice,
// whitespace collapsed and stripped, lowercased.
func cleanText(text string) string {
	text = toValidUTF8(text)
	text = unescapeHTML(unescapeHTML(text))
	text = cleanWhitespace(text)
	return lower(text)
}

// toValidUTF8 replaces invalid UTF-8 the way Python's
// bytes.decode("utf-8", errors="replace") does: one U+FFFD per maximal
// subpart of an ill-formed sequence (Unicode 3.9, "best practice"), which is
// neither Go's one-per-byte (utf8.DecodeRune) nor one-per-run
// (strings.ToValidUTF8).
func toValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			b.WriteByte(c)
			i++
			continue
		}
		n, lo, hi := 0, byte(0x80), byte(0xBF)
		switch {
		case c >= 0xC2 && c <= 0xDF:
			n = 2
		case c == 0xE0:
			n, lo = 3, 0xA0
		case c == 0xED:
			n, hi = 3, 0x9F
		case c >= 0xE1 && c <= 0xEF:
			n = 3
		case c == 0xF0:
			n, lo = 4, 0x90
		case c >= 0xF1 && c <= 0xF3:
			n = 4
		case c == 0xF4:
			n, hi = 4, 0x8F
		default:
			b.WriteRune(utf8.RuneError)
			i++
			continue
		}
		j, ok := i+1, true
		for k := 1; k < n; k++ {
			l, h := byte(0x80), byte(0xBF)
			if k == 1 {
				l, h = lo, hi
			}
			if j >= len(s) || s[j] < l || s[j] > h {
				ok = false
				break
			}
			j++
		}
		if ok {
			b.WriteString(s[i:j])
		} else {
			b.WriteRune(utf8.RuneError)
		}
		i = j
	}
	return b.String()
}

// invalidCharrefs is Python's html._invalid_charrefs: numeric references to
// these code points decode to the given text (Windows-1252 for 0x80–0x9F).
var invalidCharrefs = map[uint64]string{
	0x00: "\ufffd", 0x0d: "\r", 0x80: "\u20ac", 0x81: "\u0081", 0x82: "\u201a",
	0x83: "\u0192", 0x84: "\u201e", 0x85: "\u2026", 0x86: "\u2020", 0x87: "\u2021",
	0x88: "\u02c6", 0x89: "\u2030", 0x8a: "\u0160", 0x8b: "\u2039", 0x8c: "\u0152",
	0x8d: "\u008d", 0x8e: "\u017d", 0x8f: "\u008f", 0x90: "\u0090", 0x91: "\u2018",
	0x92: "\u2019", 0x93: "\u201c", 0x94: "\u201d", 0x95: "\u2022", 0x96: "\u2013",
	0x97: "\u2014", 0x98: "\u02dc", 0x99: "\u2122", 0x9a: "\u0161", 0x9b: "\u203a",
	0x9c: "\u0153", 0x9d: "\u009d", 0x9e: "\u017e", 0x9f: "\u0178",
}

// isInvalidCodepoint reports membership in Python's html._invalid_codepoints:
// numeric references to these decode to the empty string.
func isInvalidCodepoint(n uint64) bool {
	switch {
	case n >= 0x1 && n <= 0x8, n == 0xb, n >= 0xe && n <= 0x1f, n >= 0x7f && n <= 0x9f:
		return true
	case n >= 0xfdd0 && n <= 0xfdef:
		return true
	case n <= 0x10ffff && n&0xfffe == 0xfffe:
		return true
	}
	return false
}

// unescapeHTML is Python's html.unescape. It scans for the same pattern,
//
//	&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)
//
// and decodes numeric references with Python's rules (which differ from Go's
// html.UnescapeString for control characters and noncharacters). Named
// references are resolved by html.UnescapeString on the matched text alone:
// both use the WHATWG table and the same longest-legacy-prefix rule for names
// without a semicolon, so they agree there.
func unescapeHTML(s string) string {
	if !strings.Contains(s, "&") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	i := 0
	for {
		j := strings.IndexByte(s[i:], '&')
		if j < 0 {
			b.WriteString(s[i:])
			break
		}
		j += i
		b.WriteString(s[i:j])
		repl, n := charref(s[j+1:])
		if n == 0 {
			b.WriteByte('&')
			i = j + 1
			continue
		}
		b.WriteString(repl)
		i = j + 1 + n
	}
	return b.String()
}

// charref matches the reference that follows an '&' at the start of s. It
// returns the replacement and the number of bytes of s consumed (0: no match).
func charref(s string) (string, int) {
	if s == "" {
		return "", 0
	}
	if s[0] == '#' {
		return numericCharref(s)
	}
	// [^\t\n\f <&#;]{1,32};? counted in code points.
	n, count := 0, 0
	for n < len(s) && count < 32 {
		r, size := utf8.DecodeRuneInString(s[n:])
		if r == '\t' || r == '\n' || r == '\f' || r == ' ' || r == '<' || r == '&' || r == '#' || r == ';' {
			break
		}
		n += size
		count++
	}
	if count == 0 {
		return "", 0
	}
	if n < len(s) && s[n] == ';' {
		n++
	}
	if r, ok := missingFromGo[s[:n]]; ok {
		return r, n
	}
	return html.UnescapeString("&" + s[:n]), n
}

// missingFromGo holds the WHATWG named references that Go's
// html.UnescapeString (as of Go 1.26) leaves undecoded; Python decodes them.
var missingFromGo = map[string]string{
	"nLt;": "\u226a\u20d2",
	"nGt;": "\u226b\u20d2",
}

// numericCharref handles "#123;" and "#x1F;" (semicolon optional).
func numericCharref(s string) (string, int) {
	base, start := 10, 1
	if len(s) > 1 && (s[1] == 'x' || s[1] == 'X') {
		base, start = 16, 2
	}
	end := start
	for end < len(s) && isDigit(s[end], base) {
		end++
	}
	if end == start {
		// "#" or "#x" without digits: no branch matches (a name cannot
		// start with '#').
		return "", 0
	}
	digits := strings.TrimLeft(s[start:end], "0")
	n := end
	if n < len(s) && s[n] == ';' {
		n++
	}
	maxDigits := 7 // 0x10FFFF = 1114111
	if base == 16 {
		maxDigits = 6
	}
	var num uint64
	if len(digits) > maxDigits {
		num = 0x110000 // any value above 0x10FFFF
	} else if digits != "" {
		v, err := strconv.ParseUint(digits, base, 64)
		if err != nil {
			return "", 0
		}
		num = v
	}
	if r, ok := invalidCharrefs[num]; ok {
		return r, n
	}
	if (num >= 0xD800 && num <= 0xDFFF) || num > 0x10FFFF {
		return "\ufffd", n
	}
	if isInvalidCodepoint(num) {
		return "", n
	}
	return string(rune(num)), n
}

func isDigit(c byte, base int) bool {
	if c >= '0' && c <= '9' {
		return true
	}
	return base == 16 && ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))
}

// isPySpace is Python's str.isspace for one character (what `\s` matches in
// Python's re module): Unicode White_Space plus the information separators
// U+001C..U+001F, which Go's unicode.IsSpace does not include.
func isPySpace(r rune) bool {
	if r >= 0x1C && r <= 0x1F {
		return true
	}
	return unicode.IsSpace(r)
}

// cleanWhitespace is simple_tokenizer.py's whitespace_clean:
// re.sub(r'\s+', ' ', text).strip().
func cleanWhitespace(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	pendingSpace := false
	for _, r := range s {
		if isPySpace(r) {
			pendingSpace = b.Len() > 0
			continue
		}
		if pendingSpace {
			b.WriteByte(' ')
			pendingSpace = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// lower is Python's str.lower: the simple lowercase mapping except for
// U+0130 (İ → "i̇", its full mapping) and capital sigma, which becomes final
// sigma ς in the Final_Sigma context (preceded by a cased letter and not
// followed by one, ignoring case-ignorable characters in between).
func lower(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return strings.ToLower(s)
	}
	runes := []rune(s)
	var b strings.Builder
	b.Grow(len(s))
	for i, r := range runes {
		switch r {
		case 0x130:
			b.WriteString("i\u0307")
		case 0x3A3:
			b.WriteRune(sigma(runes, i))
		default:
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// sigma lowercases the capital sigma at runes[i] (CPython's
// handle_capital_sigma).
func sigma(runes []rune, i int) rune {
	j := i - 1
	for j >= 0 && isCaseIgnorable(runes[j]) {
		j--
	}
	final := j >= 0 && isCased(runes[j])
	if final {
		k := i + 1
		for k < len(runes) && isCaseIgnorable(runes[k]) {
			k++
		}
		final = k == len(runes) || !isCased(runes[k])
	}
	if final {
		return 0x3C2
	}
	return 0x3C3
}

// isCased is the Unicode derived property Cased: Lowercase, Uppercase or Lt.
func isCased(r rune) bool {
	return unicode.In(r, unicode.Lu, unicode.Ll, unicode.Lt, unicode.Other_Lowercase, unicode.Other_Uppercase)
}

// isCaseIgnorable is the Unicode derived property Case_Ignorable: Mn, Me, Cf,
// Lm, Sk, or Word_Break MidLetter, MidNumLet or Single_Quote.
func isCaseIgnorable(r rune) bool {
	switch r {
	case '\'', '.', ':', 0xB7, 0x387, 0x55F, 0x5F4, 0x2018, 0x2019, 0x2024, 0x2027,
		0xFE13, 0xFE52, 0xFE55, 0xFF07, 0xFF0E, 0xFF1A:
		return true
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}

// Pre-tokenizer. simple_tokenizer.py splits the cleaned text with
//
//	<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
//
// compiled with regex.IGNORECASE and keeps the matches (findall). split does
// the same by hand. Two consequences of IGNORECASE survive lowercasing and
// are reproduced: U+017F (ſ, long s) matches the "s" of "'s" and of the
// special tokens (simple case folding), and U+0345 (combining ypogegrammeni,
// whose case variants are letters) matches none of the three classes, so
// like whitespace it is skipped.

const (
	sotText = "<|startoftext|>"
	eotText = "<|endoftext|>"
)

// foldEq reports whether r matches the ASCII pattern letter p case-insensitively.
func foldEq(r rune, p byte) bool {
	if r == rune(p) {
		return true
	}
	if p >= 'a' && p <= 'z' {
		if r == rune(p-'a'+'A') {
			return true
		}
		if p == 's' && r == 0x17F {
			return true
		}
	}
	return false
}

// matchFold returns the byte length of the prefix of s matching the ASCII
// pattern pat case-insensitively, or 0.
func matchFold(s, pat string) int {
	n := 0
	for k := 0; k < len(pat); k++ {
		if n >= len(s) {
			return 0
		}
		r, size := utf8.DecodeRuneInString(s[n:])
		if !foldEq(r, pat[k]) {
			return 0
		}
		n += size
	}
	return n
}

var contractions = []string{"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"}

// splitSkip reports whether findall never starts or continues a match at r.
func splitSkip(r rune) bool {
	return unicode.Is(unicode.White_Space, r) || r == 0x345
}

// split returns the pre-tokens of cleaned text, as re.findall(pat, text).
func split(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if splitSkip(r) {
			i += size
			continue
		}
		n := 0
		if r == '<' {
			if n = matchFold(s[i:], sotText); n == 0 {
				n = matchFold(s[i:], eotText)
			}
		} else if r == '\'' {
			for _, c := range contractions {
				if n = matchFold(s[i:], c); n > 0 {
					break
				}
			}
		}
		if n == 0 {
			switch {
			case unicode.IsLetter(r):
				n = runLen(s[i:], func(r rune) bool { return unicode.IsLetter(r) })
			case unicode.IsNumber(r):
				n = size
			default:
				n = runLen(s[i:], func(r rune) bool {
					return !splitSkip(r) && !unicode.IsLetter(r) && !unicode.IsNumber(r)
				})
			}
		}
		out = append(out, s[i:i+n])
		i += n
	}
	return out
}

// runLen returns the byte length of the longest prefix of s whose runes all
// satisfy in.
func runLen(s string, in func(rune) bool) int {
	for i, r := range s {
		if !in(r) {
			return i
		}
	}
	return len(s)
}
