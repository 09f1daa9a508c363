package maple

import (
	"math"
	"strings"
	"testing"
)

// TestConfigBoundaries: the edges Validate allows are allowed (n_ctx 1,
// depth 1, depth = the model's blocks, init_std 0; any depth when the
// blocks are unknown) and the values just outside are refused, naming the
// key.
func TestConfigBoundaries(t *testing.T) {
	for name, c := range map[string]Config{
		"n_ctx 1":          {NCtx: 1, Depth: 2, InitStd: 0.02},
		"depth 1":          {NCtx: 2, Depth: 1, InitStd: 0.02},
		"depth = blocks":   {NCtx: 2, Depth: 3, InitStd: 0.02},
		"init_std 0":       {NCtx: 2, Depth: 2},
		"blocks not known": {NCtx: 2, Depth: 48, InitStd: 0.02},
	} {
		layers := 3
		if name == "blocks not known" {
			layers = 0
		}
		if err := c.Validate(layers); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
	for _, tc := range []struct {
		key string
		c   Config
	}{
		{"n_ctx", Config{NCtx: 0, Depth: 2}},
		{"prompt_depth", Config{NCtx: 2, Depth: 0}},
		{"prompt_depth", Config{NCtx: 2, Depth: 4}},
		{"init_std", Config{NCtx: 2, Depth: 2, InitStd: -1e-9}},
		{"init_std", Config{NCtx: 2, Depth: 2, InitStd: math.NaN()}},
	} {
		if err := tc.c.Validate(3); err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%+v: error %v, want one naming %s", tc.c, err, tc.key)
		}
	}
}

// TestSettingsEdges: a prompt depth equal to the model's blocks is kept by
// Depth and FitModel; FitModel leaves a block-less model's settings alone
// and fits 9 of 12 to 1 block as 1; ctx_init applies up to n_ctx 4.
func TestSettingsEdges(t *testing.T) {
	s := Method{}.DefaultConfig().(*Settings)
	if _, err := (Method{}).Depth(s, 9); err != nil {
		t.Errorf("prompt_depth 9 on 9 blocks: %v", err)
	}
	if c := s.FitModel(9); c != nil || s.PromptDepth != 9 {
		t.Errorf("fit of depth 9 to 9 blocks: %v, depth %d", c, s.PromptDepth)
	}
	if c := s.FitModel(0); c != nil || s.PromptDepth != 9 {
		t.Errorf("fit to no blocks: %v, depth %d", c, s.PromptDepth)
	}
	if c := s.FitModel(1); len(c) != 1 || s.PromptDepth != 1 || !strings.Contains(c[0], "prompt_depth 9 → 1") {
		t.Errorf("fit to 1 block: %v, depth %d", c, s.PromptDepth)
	}
	s = Method{}.DefaultConfig().(*Settings)
	s.NCtx = 4
	if w, from := s.words(); !from || w != "a photo of a" {
		t.Errorf("n_ctx 4 with ctx_init: words %q, from tokens %v", w, from)
	}
}

// TestNewRows: no rows, a partial row, or an EOT inside the context
// positions are refused; an EOT right after them is accepted.
func TestNewRows(t *testing.T) {
	m, tokens := randomModel(2, 2)
	cfg := Config{NCtx: 2, Depth: 2, InitStd: 0.02}
	if _, err := New(m, tokens, cfg); err != nil {
		t.Fatal(err)
	}
	L := m.W.Config.Text.ContextLength
	row := func(ids ...int) []int { r := make([]int, L); copy(r, ids); return r }
	if _, err := New(m, row(18, 5, 5, 19), cfg); err != nil {
		t.Errorf("EOT at position 3 after 2 context tokens: %v", err)
	}
	for name, tok := range map[string][]int{
		"no rows":     {},
		"partial row": tokens[:L+1],
		"EOT at 2":    row(18, 5, 19),
	} {
		if _, err := New(m, tok, cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestStepAndLogitsInput: labels outside 0..C−1 and too few prefix values
// are errors naming them.
func TestStepAndLogitsInput(t *testing.T) {
	m, tokens := randomModel(3, 2)
	l, err := New(m, tokens, Config{NCtx: 2, Depth: 2, InitStd: 0.02})
	if err != nil {
		t.Fatal(err)
	}
	prefix := make([]float32, l.T0*l.Dv)
	for i := range prefix {
		prefix[i] = float32(i%7) - 3
	}
	if _, _, _, err := l.Step(prefix, []int{2}); err != nil {
		t.Fatalf("label 2 of 3: %v", err)
	}
	for _, y := range []int{3, -1} {
		if _, _, _, err := l.Step(prefix, []int{y}); err == nil || !strings.Contains(err.Error(), "outside 0..2") {
			t.Errorf("label %d of 3: error %v", y, err)
		}
	}
	if _, _, _, err := l.Step(prefix[:len(prefix)-1], []int{0}); err == nil || !strings.Contains(err.Error(), "prefix") {
		t.Errorf("a short prefix: error %v", err)
	}
	if err := l.Prepare(); err != nil {
		t.Fatal(err)
	}
	if got, err := l.Logits(prefix, 1); err != nil || len(got) != 3 {
		t.Fatalf("Logits: %v, %v", got, err)
	}
	if _, err := l.Logits(prefix[:len(prefix)-1], 1); err == nil || !strings.Contains(err.Error(), "prefix") {
		t.Errorf("Logits of a short prefix: error %v", err)
	}
}

// TestCheckInitWords: class prompts that share their first n_ctx tokens
// (the ctx_init words) pass, over every row; rows that differ inside them
// are refused naming the first differing position; without ctx_init
// nothing is checked.
func TestCheckInitWords(t *testing.T) {
	const L = 12
	rows := make([]int, 3*L)
	copy(rows, []int{18, 7, 8, 9, 3, 19})
	copy(rows[L:], []int{18, 7, 8, 9, 4, 3, 19})
	copy(rows[2*L:], []int{18, 7, 8, 9, 5, 6, 3, 19})
	cfg := Config{NCtx: 3, Depth: 1, CtxFromTokens: true}
	if err := checkInitWords(rows, L, cfg); err != nil {
		t.Errorf("three prompts sharing 3 words: %v", err)
	}
	rows[2*L+2] = 11 // the last row differs at position 2
	err := checkInitWords(rows, L, cfg)
	if err == nil || !strings.Contains(err.Error(), "maple.ctx_init") || !strings.Contains(err.Error(), "differ at position 2") {
		t.Errorf("the last row differing at position 2: %v", err)
	}
	cfg.CtxFromTokens = false
	if err := checkInitWords(rows, L, cfg); err != nil {
		t.Errorf("no ctx_init: %v", err)
	}
}
