package fedmvp

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/protocol"
)

// TestDescriptionsCutAt77Characters: the descriptions are cut as the
// authors' truncate_text(d, 77) (text[:77], Python code points): a
// generated description of the world reaches 94 characters; its cut is
// its first 77 characters, shorter ones are untouched, and multi-byte
// characters count once.
func TestDescriptionsCutAt77Characters(t *testing.T) {
	long := 0
	for _, d := range Descriptions("yellow checkered triangle", "a photo of a {}.") {
		got := Truncate(d)
		switch {
		case len(d) > 77:
			long++
			if got != d[:77] {
				t.Errorf("%q cut to %q, want %q", d, got, d[:77])
			}
		case got != d:
			t.Errorf("%q (%d characters) cut to %q", d, len(d), got)
		}
	}
	if long == 0 {
		t.Fatal("no generated description above 77 characters: nothing cut")
	}
	s := strings.Repeat("é", 80)
	if got := Truncate(s); utf8.RuneCountInString(got) != 77 || got != strings.Repeat("é", 77) {
		t.Errorf("80 × é cut to %d characters", utf8.RuneCountInString(got))
	}
}

// TestSpaceDescriptionsAreCut: the description token rows a run trains
// with are those of the cut descriptions (the shipped model's 77-token
// context holds more than 77 characters' tokens, so the cut shows).
func TestSpaceDescriptionsAreCut(t *testing.T) {
	w, tok, err := assets.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	class := "yellow checkered triangle"
	env := &methods.Env{Model: m, Tok: tok, Template: "a photo of a {}.",
		Task: &protocol.Task{Dataset: &dataset.Dataset{Classes: []string{class}}, Spaces: []protocol.Space{{Classes: []int{0}}}}}
	tokens, _, err := spaceDescriptions(env, &Settings{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := w.Config.Text.ContextLength
	cut := 0
	for i, d := range Descriptions(class, env.Template) {
		want, err := tok.Tokenize(Truncate(d), ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		full, _ := tok.Tokenize(d, ctx, true)
		if !slices.Equal(want, full) {
			cut++
		}
		if got := tokens[i*ctx : (i+1)*ctx]; !slices.Equal(got, want) {
			t.Errorf("description %d %q: tokens %v, want those of its first 77 characters %v", i, d, got, want)
		}
	}
	if cut == 0 {
		t.Fatalf("the cut changes no description's tokens (context %d)", ctx)
	}
}
