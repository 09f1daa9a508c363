package fedtpg

import (
	"slices"
	"strings"
	"testing"
)

// TestGenConfigBoundaries: the smallest shapes Validate allows are allowed
// (n_ctx 1, depth 0, one head of each kind, ff_mult 1, widths 1) and the
// values just outside are refused, naming the key; so is a negative
// init_std, while 0 is allowed.
func TestGenConfigBoundaries(t *testing.T) {
	base := GenConfig{NCtx: 4, DCtx: 1, Depth: 0, CrossHeads: 4, SelfHeads: 4, FFMult: 4, E: 8, D: 6}
	for name, mod := range map[string]func(*GenConfig){
		"n_ctx 1":           func(c *GenConfig) { c.NCtx = 1 },
		"depth 0":           func(c *GenConfig) { c.Depth = 0 },
		"one head each":     func(c *GenConfig) { c.CrossHeads, c.SelfHeads = 1, 1 },
		"heads = the width": func(c *GenConfig) { c.CrossHeads, c.SelfHeads = 8, 8 },
		"ff_mult 1":         func(c *GenConfig) { c.FFMult = 1 },
		"widths 1":          func(c *GenConfig) { c.E, c.D, c.CrossHeads, c.SelfHeads = 1, 1, 1, 1 },
	} {
		c := base
		mod(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
	for _, tc := range []struct {
		key string
		mod func(*GenConfig)
	}{
		{"n_ctx", func(c *GenConfig) { c.NCtx = 0 }},
		{"d_ctx", func(c *GenConfig) { c.DCtx = 2 }},
		{"depth", func(c *GenConfig) { c.Depth = -1 }},
		{"cross_heads", func(c *GenConfig) { c.CrossHeads = 0 }},
		{"cross_heads", func(c *GenConfig) { c.CrossHeads = 3 }},
		{"self_heads", func(c *GenConfig) { c.SelfHeads = 0 }},
		{"self_heads", func(c *GenConfig) { c.SelfHeads = 3 }},
		{"ff_mult", func(c *GenConfig) { c.FFMult = 0 }},
		{"widths", func(c *GenConfig) { c.D = 0 }},
	} {
		c := base
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%+v: error %v, want one naming %s", c, err, tc.key)
		}
	}
	d := DefaultConfig()
	d.InitStd = 0
	if err := d.Validate(); err != nil {
		t.Errorf("init_std 0: %v", err)
	}
	d.InitStd = -1e-9
	if err := d.Validate(); err == nil || !strings.Contains(err.Error(), "init_std") {
		t.Errorf("init_std −1e-9: %v", err)
	}
}

// TestNameRowsEdges: a one-token name ("SOT X…X name . EOT", EOT at
// n_ctx + 3) keeps that token between SOT and EOT; a row with no name
// (EOT at n_ctx + 2) and rows that are not whole are refused.
func TestNameRowsEdges(t *testing.T) {
	const L = 8
	row := func(ids ...int) []int { r := make([]int, L); copy(r, ids); return r }
	got, err := NameRows(row(49, 5, 5, 7, 3, 50), L, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := row(49, 7, 50); !slices.Equal(got, want) {
		t.Errorf("name row %v, want %v", got, want)
	}
	if _, err := NameRows(row(49, 5, 5, 3, 50), L, 2); err == nil || !strings.Contains(err.Error(), "no class name") {
		t.Errorf("a row without a name: %v", err)
	}
	for _, c := range []struct {
		n, L int
	}{{L + 1, L}, {L, 0}} {
		if _, err := NameRows(make([]int, c.n), c.L, 2); err == nil {
			t.Errorf("%d ids in rows of %d: accepted", c.n, c.L)
		}
	}
}

// TestLearnerInput: name rows that do not match the prompt rows, an empty
// batch, and scoring before Prepare are errors.
func TestLearnerInput(t *testing.T) {
	m, tokens, names := randomModel(t, 3, 2, 1)
	cfg := DefaultConfig()
	cfg.NCtx, cfg.CrossHeads, cfg.SelfHeads = 2, 2, 2
	if _, err := New(m, tokens, names[:len(names)-12], cfg); err == nil {
		t.Error("2 name rows for 3 prompt rows accepted")
	}
	l, err := New(m, tokens, names, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := l.Step(nil, nil); err == nil {
		t.Error("empty batch accepted")
	}
	img := []float32{1, 2, -1, 0.5, 0, 3}
	if _, err := l.Logits(img, 1); err == nil || !strings.Contains(err.Error(), "Prepare") {
		t.Errorf("Logits before Prepare: %v", err)
	}
	if err := l.Prepare(); err != nil {
		t.Fatal(err)
	}
	if got, err := l.Logits(img, 1); err != nil || len(got) != 3 {
		t.Errorf("Logits after Prepare: %v, %v", got, err)
	}
}
