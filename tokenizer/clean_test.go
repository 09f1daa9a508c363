package tokenizer

import (
	"slices"
	"testing"
)

// The expected values in this file were produced by CPython 3.11
// (html.unescape, str.lower, re.sub(r'\s+', ...), bytes.decode(errors="replace"))
// and the `regex` module with simple_tokenizer.py's pattern.

func TestUnescapeHTML(t *testing.T) {
	tests := []struct{ in, once, twice string }{
		{"&amp;", "&", "&"},
		{"&amp", "&", "&"},
		{"&ampx;", "&x;", "&x;"},
		{"&AMP;", "&", "&"},
		{"&notit;", "¬it;", "¬it;"},
		{"&hellip", "&hellip", "&hellip"},
		{"&hellip;", "…", "…"},
		{"&#65;", "A", "A"},
		{"&#x41", "A", "A"},
		{"&#X4a;", "J", "J"},
		{"&#0;", "\ufffd", "\ufffd"},
		{"&#13;", "\r", "\r"},
		{"&#128;", "€", "€"},
		{"&#129;", "\u0081", "\u0081"},
		{"&#127;", "", ""},
		{"&#11;", "", ""},
		{"&#xD800;", "\ufffd", "\ufffd"},
		{"&#x110000;", "\ufffd", "\ufffd"},
		{"&#99999999999999999999;", "\ufffd", "\ufffd"},
		{"&#xFDD0;", "", ""},
		{"&#x1FFFF;", "", ""},
		{"&#;", "&#;", "&#;"},
		{"&#x;", "&#x;", "&#x;"},
		{"&;", "&;", "&;"},
		{"& amp;", "& amp;", "& amp;"},
		{"&nLt;", "≪⃒", "≪⃒"},
		{"&amp;lt;", "&lt;", "<"},
		{"a&b", "a&b", "a&b"},
		{"&CounterClockwiseContourIntegral;", "∳", "∳"},
		{"&ampé", "&é", "&é"},
	}
	for _, tt := range tests {
		if got := unescapeHTML(tt.in); got != tt.once {
			t.Errorf("unescapeHTML(%q) = %q, want %q", tt.in, got, tt.once)
		}
		if got := unescapeHTML(unescapeHTML(tt.in)); got != tt.twice {
			t.Errorf("unescapeHTML twice (%q) = %q, want %q", tt.in, got, tt.twice)
		}
	}
}

func TestLower(t *testing.T) {
	tests := []struct{ in, want string }{
		{"ΑΣ", "ας"},
		{"Σ", "σ"},
		{"ΑΣ.", "ας."},
		{"ΑΣΑ", "ασα"},
		{"Α.Σ", "α.ς"},
		{"ΣΑ", "σα"},
		{"ΑΣ'Α", "ασ'α"},
		{"İstanbul", "i\u0307stanbul"},
		{"ǅ", "ǆ"},
		{"\u212a", "k"},
		{"UPPER MiXeD", "upper mixed"},
	}
	for _, tt := range tests {
		if got := lower(tt.in); got != tt.want {
			t.Errorf("lower(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestCleanText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"a\x1cb", "a b"},
		{"a\u3000\u00a0b", "a b"},
		{"  x  ", "x"},
		{"\u200bq", "\u200bq"},
		{"  multiple   spaces\tand\ttabs  ", "multiple spaces and tabs"},
		{"&amp;lt;B&amp;gt;", "<b>"},
		{"&#32;&#32;x&nbsp;", "x"},
	}
	for _, tt := range tests {
		if got := cleanText(tt.in); got != tt.want {
			t.Errorf("cleanText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestToValidUTF8(t *testing.T) {
	tests := []struct{ in, want string }{
		{"ok é", "ok é"},
		{"\xff", "\ufffd"},
		{"\xe2\x82a", "\ufffda"},               // one maximal subpart
		{"\xe0\x80\x80", "\ufffd\ufffd\ufffd"}, // E0 needs A0..BF next
		{"\xed\xa0\x80", "\ufffd\ufffd\ufffd"}, // surrogate
		{"\xf0\x9f\x98", "\ufffd"},
		{"\xf4\x90\x80\x80", "\ufffd\ufffd\ufffd\ufffd"},
		{"\xc0\xaf", "\ufffd\ufffd"},
	}
	for _, tt := range tests {
		if got := toValidUTF8(tt.in); got != tt.want {
			t.Errorf("toValidUTF8(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSplit(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"it'ſ", []string{"it", "'ſ"}},
		{"<|ſtartoftext|>", []string{"<|ſtartoftext|>"}},
		{"a\u0345b", []string{"a", "b"}},
		{"!\u0345?", []string{"!", "?"}},
		{"x's'sam", []string{"x", "'s", "'s", "am"}},
		{"!'s", []string{"!'", "s"}},
		{"don't", []string{"don", "'t"}},
		{"a1b22", []string{"a", "1", "b", "2", "2"}},
		{"<|endoftext|>x", []string{"<|endoftext|>", "x"}},
		{"!<|startoftext|>", []string{"!<|", "startoftext", "|>"}},
		{"3.14", []string{"3", ".", "1", "4"}},
		{"", nil},
	}
	for _, tt := range tests {
		if got := split(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("split(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
