package world

import (
	"math/rand/v2"
	"strings"
)

// Detail is how much of a sample a caption describes.
type Detail int

// The caption detail levels.
const (
	// Basic captions name the colour and the shape only: "a red triangle".
	Basic Detail = 1 + iota
	// Class captions name colour, pattern and shape: "a striped red
	// triangle", "a triangle, red, striped".
	Class
	// Full captions add the size and position, and sometimes the clutter:
	// "a photo of a small red triangle with stripes on the left".
	Full
)

// Caption words. Captions use no colour, shape, pattern, size or domain
// words other than the sample's own.
var (
	domainPhrases = [NumDomains][]string{
		Photo:    {"a photo of", "a photograph of", "a close-up photo of"},
		Clipart:  {"a clipart of", "a cartoon of", "an illustration of", "a flat icon of"},
		Sketch:   {"a sketch of", "a drawing of", "a pencil sketch of", "a line drawing of"},
		Painting: {"a painting of", "an oil painting of", "a brushy painting of"},
	}
	// genericPhrase stands in for a domain phrase without naming a style.
	genericPhrase  = "a picture of"
	patternAdjs    = [][]string{{"solid", "plain"}, {"striped"}, {"dotted", "polka-dot", "spotted"}, {"checkered", "checkerboard"}}
	patternPhrases = [][]string{
		{"with no pattern", "in one solid colour"},
		{"with stripes", "with stripes on it"},
		{"with dots", "with polka dots", "covered in dots"},
		{"with a checkered pattern", "with checks"},
	}
	sizeWords     = [][]string{{"small", "little"}, {"medium-sized", "mid-sized"}, {"large", "big"}}
	positionWords = map[string][]string{
		"centre":       {"in the centre", "in the middle"},
		"left":         {"on the left"},
		"right":        {"on the right"},
		"top":          {"at the top"},
		"bottom":       {"at the bottom"},
		"top left":     {"in the top left corner", "at the top left"},
		"top right":    {"in the top right corner", "at the top right"},
		"bottom left":  {"in the bottom left corner", "at the bottom left"},
		"bottom right": {"in the bottom right corner", "at the bottom right"},
	}
	clutterPhrases = []string{", with a few other things around it", " among some clutter", ", next to a few scribbles", " with stray marks around it"}
	emptyPhrases   = []string{" on an empty background", " on its own"}
)

// Templates per detail level. Slots: {A} an article or a domain phrase plus
// article; {D} a domain phrase; {a} an article; {c} colour; {p} pattern
// adjective; {w} pattern phrase; {s} shape; {z} size; {o} position;
// {x} clutter remark (may be empty).
var templates = [...][]string{
	Basic: {"{A} {c} {s}", "{D} {a} {c} {s}", "{A} {s} that is {c}", "{c} {s}", "{A} {s}, {c}"},
	Class: {
		"{A} {c} {p} {s}", "{A} {p} {c} {s}", "{D} {a} {c} {p} {s}", "{A} {c} {s} {w}",
		"{A} {s}, {c}, {p}", "{A} {p} {s} in {c}", "{c} {p} {s}",
	},
	Full: {
		"{D} {a} {z} {c} {s} {w} {o}", "{A} {z} {p} {c} {s} {o}{x}", "{D} {a} {c} {p} {s}, {z}, {o}",
		"there is {a} {z} {c} {s} {w} {o}{x}", "{D} {a} {s}, {c}, {p}, {z}, {o}", "{A} {z} {c} {p} {s} {o}{x}",
	},
}

// Caption returns the caption of sample s and its detail level. It is a
// pure function of the world seed and s.
func (w *World) Caption(s Spec) (string, Detail, error) {
	if err := s.validate(); err != nil {
		return "", 0, err
	}
	sc := w.scene(s)
	text, d := caption(&sc, w.rng(s, saltCaption))
	return text, d, nil
}

func caption(sc *Scene, r *rand.Rand) (string, Detail) {
	var d Detail
	switch u := r.Float64(); {
	case u < 0.2:
		d = Basic
	case u < 0.6:
		d = Class
	default:
		d = Full
	}
	pick := func(xs []string) string { return xs[r.IntN(len(xs))] }
	domain := func() string {
		if r.IntN(4) == 0 {
			return genericPhrase
		}
		return pick(domainPhrases[sc.Spec.Domain])
	}
	c := sc.Spec.Class
	tpl := pick(templates[d])
	var b strings.Builder
	for i := 0; i < len(tpl); i++ {
		if tpl[i] != '{' {
			b.WriteByte(tpl[i])
			continue
		}
		slot := tpl[i+1]
		i += 2 // skip "{x}" (the loop adds the last one)
		switch slot {
		case 'A':
			if r.IntN(2) == 0 {
				b.WriteString(domain())
				b.WriteByte(' ')
			}
			b.WriteString("a")
		case 'D':
			b.WriteString(domain())
		case 'a':
			b.WriteString("a")
		case 'c':
			b.WriteString(c.Colour.String())
		case 's':
			b.WriteString(c.Shape.String())
		case 'p':
			b.WriteString(pick(patternAdjs[c.Pattern]))
		case 'w':
			b.WriteString(pick(patternPhrases[c.Pattern]))
		case 'z':
			b.WriteString(pick(sizeWords[sc.Size]))
		case 'o':
			b.WriteString(pick(positionWords[sc.Position()]))
		case 'x':
			switch {
			case sc.Distractors >= 2 && r.IntN(2) == 0:
				b.WriteString(pick(clutterPhrases))
			case sc.Distractors == 0 && r.IntN(2) == 0:
				b.WriteString(pick(emptyPhrases))
			}
		}
	}
	return fixArticles(b.String()), d
}

// fixArticles turns "a" into "an" before a word starting with a vowel.
func fixArticles(s string) string {
	words := strings.Split(s, " ")
	for i := 0; i+1 < len(words); i++ {
		if words[i] == "a" && words[i+1] != "" && strings.ContainsRune("aeiou", rune(words[i+1][0])) {
			words[i] = "an"
		}
	}
	return strings.Join(words, " ")
}
