package world

import (
	"strings"
	"testing"
)

// parsed is what an independent reading of a caption finds.
type parsed struct {
	colours, shapes, patterns, sizes, domains []string
	position                                  string // "" when none
}

// vocabulary, written independently of caption.go.
var (
	testPatternWords = map[string]string{
		"solid": "solid", "plain": "solid", "no pattern": "solid",
		"striped": "striped", "stripes": "striped",
		"dotted": "dotted", "polka-dot": "dotted", "dots": "dotted", "spotted": "dotted",
		"checkered": "checkered", "checkerboard": "checkered", "checks": "checkered",
	}
	testSizeWords = map[string]string{
		"small": "small", "little": "small", "medium-sized": "medium", "mid-sized": "medium", "large": "large", "big": "large",
	}
	testDomainWords = map[string]string{
		"photo": "photo", "photograph": "photo", "clipart": "clipart", "cartoon": "clipart", "illustration": "clipart",
		"icon": "clipart", "sketch": "sketch", "drawing": "sketch", "painting": "painting",
	}
)

func parseCaption(text string) parsed {
	padded := " " + strings.NewReplacer(",", " ", ".", " ").Replace(text) + " "
	has := func(phrase string) bool { return strings.Contains(padded, " "+phrase+" ") }
	var p parsed
	for _, c := range []string{"red", "orange", "yellow", "green", "blue", "purple", "pink", "brown"} {
		if has(c) {
			p.colours = append(p.colours, c)
		}
	}
	for _, s := range []string{"circle", "square", "triangle", "star", "hexagon", "diamond", "heart", "cross"} {
		if has(s) {
			p.shapes = append(p.shapes, s)
		}
	}
	add := func(list []string, v string) []string {
		for _, x := range list {
			if x == v {
				return list
			}
		}
		return append(list, v)
	}
	for w, v := range testPatternWords {
		if has(w) {
			p.patterns = add(p.patterns, v)
		}
	}
	for w, v := range testSizeWords {
		if has(w) {
			p.sizes = add(p.sizes, v)
		}
	}
	for w, v := range testDomainWords {
		if has(w) {
			p.domains = add(p.domains, v)
		}
	}
	v, h := "", ""
	for _, x := range []string{"top", "bottom"} {
		if has(x) {
			v = x
		}
	}
	for _, x := range []string{"left", "right"} {
		if has(x) {
			h = x
		}
	}
	switch {
	case has("centre") || has("middle"):
		p.position = "centre"
	case v != "" && h != "":
		p.position = v + " " + h
	default:
		p.position = v + h
	}
	return p
}

func TestCaptionsParseBack(t *testing.T) {
	w := newWorld(t, nil)
	pairs, err := w.Pretrain(0, 3000)
	if err != nil {
		t.Fatal(err)
	}
	details := map[Detail]int{}
	distinct := map[string]bool{}
	domainMentions := 0
	for _, pr := range pairs {
		s := pr.Spec
		c := s.Class
		p := parseCaption(pr.Caption)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Errorf("caption %q (%s, detail %d): "+format, append([]any{pr.Caption, s.Key(), pr.Detail}, args...)...)
		}
		if len(p.colours) != 1 || p.colours[0] != c.Colour.String() {
			fail("colours %v, want [%s]", p.colours, c.Colour)
		}
		if len(p.shapes) != 1 || p.shapes[0] != c.Shape.String() {
			fail("shapes %v, want [%s]", p.shapes, c.Shape)
		}
		switch {
		case pr.Detail == Basic && len(p.patterns) != 0:
			fail("basic caption names patterns %v", p.patterns)
		case pr.Detail >= Class && (len(p.patterns) != 1 || p.patterns[0] != c.Pattern.String()):
			fail("patterns %v, want [%s]", p.patterns, c.Pattern)
		}
		sc, err := w.Scene(s)
		if err != nil {
			t.Fatal(err)
		}
		if pr.Detail == Full {
			if len(p.sizes) != 1 || p.sizes[0] != sc.Size.String() {
				fail("sizes %v, want [%s]", p.sizes, sc.Size)
			}
			if p.position != sc.Position() {
				fail("position %q, want %q", p.position, sc.Position())
			}
		} else if len(p.sizes) != 0 || p.position != "" {
			fail("detail %d caption names size %v or position %q", pr.Detail, p.sizes, p.position)
		}
		if len(p.domains) > 1 || (len(p.domains) == 1 && p.domains[0] != s.Domain.String()) {
			fail("domains %v, want none or [%s]", p.domains, s.Domain)
		}
		if len(p.domains) == 1 {
			domainMentions++
		}
		for _, bad := range []string{" a a", " a e", " a i", " a o", " a u", "  ", "{", "}"} {
			if strings.Contains(" "+pr.Caption, bad) {
				fail("contains %q", bad)
			}
		}
		// deterministic per sample
		again, d, err := w.Caption(s)
		if err != nil || again != pr.Caption || d != pr.Detail {
			fail("Caption(spec) = %q, %d, %v", again, d, err)
		}
		details[pr.Detail]++
		distinct[pr.Caption] = true
	}
	for _, d := range []Detail{Basic, Class, Full} {
		if details[d] < len(pairs)/10 {
			t.Errorf("detail %d used %d times in %d captions", d, details[d], len(pairs))
		}
	}
	if domainMentions < len(pairs)/5 || domainMentions > len(pairs)*4/5 {
		t.Errorf("%d of %d captions mention the domain; want some but not all", domainMentions, len(pairs))
	}
	if len(distinct) < len(pairs)/2 {
		t.Errorf("only %d distinct captions in %d", len(distinct), len(pairs))
	}
}

func TestCaptionTemplatesWellFormed(t *testing.T) {
	for d, list := range templates {
		for _, tpl := range list {
			if strings.Count(tpl, "{") != strings.Count(tpl, "}") {
				t.Errorf("detail %d template %q: unbalanced braces", d, tpl)
			}
			for _, slot := range []string{"{c}", "{s}"} {
				if !strings.Contains(tpl, slot) {
					t.Errorf("detail %d template %q lacks %s", d, tpl, slot)
				}
			}
			hasPattern := strings.Contains(tpl, "{p}") || strings.Contains(tpl, "{w}")
			if hasPattern != (Detail(d) >= Class) {
				t.Errorf("detail %d template %q: pattern slot present = %v", d, tpl, hasPattern)
			}
		}
	}
}
