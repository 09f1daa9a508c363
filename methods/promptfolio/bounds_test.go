package promptfolio

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestConfigBoundaries: the edges Validate allows are allowed (n_ctx 1,
// θ 0 and 1, init_std 0) and the values just outside are refused, naming
// the key.
func TestConfigBoundaries(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"n_ctx 1":    func(c *Config) { c.NCtx = 1 },
		"theta 0":    func(c *Config) { c.Theta = 0 },
		"theta 1":    func(c *Config) { c.Theta = 1 },
		"init_std 0": func(c *Config) { c.InitStd = 0 },
	} {
		c := DefaultConfig()
		mod(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
	for _, tc := range []struct {
		key string
		mod func(*Config)
	}{
		{"n_ctx", func(c *Config) { c.NCtx = 0 }},
		{"theta", func(c *Config) { c.Theta = -1e-9 }},
		{"theta", func(c *Config) { c.Theta = 1 + 1e-9 }},
		{"theta", func(c *Config) { c.Theta = math.NaN() }},
		{"init_std", func(c *Config) { c.InitStd = -1e-9 }},
	} {
		c := DefaultConfig()
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%+v: error %v, want one naming %s", c, err, tc.key)
		}
	}
}

// TestSettingsPosition: class_token_position is accepted empty or "end"
// and refused otherwise, naming the key.
func TestSettingsPosition(t *testing.T) {
	for _, pos := range []string{"", "end"} {
		s := Method{}.DefaultConfig().(*Settings)
		s.ClassTokenPosition = pos
		if err := config.CheckSection("promptfolio", s); err != nil {
			t.Errorf("position %q: %v", pos, err)
		}
	}
	for _, pos := range []string{"middle", "front"} {
		s := Method{}.DefaultConfig().(*Settings)
		s.ClassTokenPosition = pos
		if err := config.CheckSection("promptfolio", s); err == nil || !strings.Contains(err.Error(), "promptfolio.class_token_position") {
			t.Errorf("position %q: error %v, want one naming promptfolio.class_token_position", pos, err)
		}
	}
}

// tinyLearner is a learner on a random CLIP of context length 8, 2 classes
// ("SOT X X class EOT", n_ctx 2).
func tinyLearner(t *testing.T, cfg Config) *Learner {
	t.Helper()
	mc := clip.Config{EmbedDim: 8,
		Vision: clip.VisionConfig{ImageSize: 8, PatchSize: 4, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16},
		Text:   clip.TextConfig{ContextLength: 8, VocabSize: 30, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16}}
	tokens := make([]int, 2*8)
	for c := range 2 {
		copy(tokens[c*8:], []int{28, 3, 3, 10 + c, 29})
	}
	cfg.NCtx = 2
	l, err := New(clip.New(clip.Random(mc, 1)), tokens, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestInitDraw: both contexts start as draws of N(0, init_std²) (sample
// standard deviation within 30% over 32 draws; a wrong scale is off by
// orders of magnitude), and init_std 0 starts them at 0.
func TestInitDraw(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Seed = 4
	l := tinyLearner(t, cfg)
	var ss float64
	for _, v := range l.ctx.Data {
		ss += float64(v) * float64(v)
	}
	if sd := math.Sqrt(ss / float64(len(l.ctx.Data))); math.Abs(sd-cfg.InitStd) > 0.3*cfg.InitStd {
		t.Errorf("contexts' standard deviation %g, want init_std %g", sd, cfg.InitStd)
	}
	cfg.InitStd = 0
	for i, v := range tinyLearner(t, cfg).ctx.Data {
		if v != 0 {
			t.Fatalf("init_std 0: context [%d] = %g", i, v)
		}
	}
}

// TestStepAndLogitsRefuseBadInput: an empty batch, image features of the
// wrong size and labels outside 0..C−1 are errors, not panics; Logits
// refuses the same and refuses to run before Prepare. A valid call works.
func TestStepAndLogitsRefuseBadInput(t *testing.T) {
	l := tinyLearner(t, DefaultConfig())
	img := []float32{1, -2, 3, 0.5, -1, 2, 0.25, 1}
	if _, _, _, err := l.Step(img, []int{1}); err != nil {
		t.Fatalf("valid step: %v", err)
	}
	for name, call := range map[string]func() error{
		"empty batch": func() error { _, _, _, err := l.Step(nil, nil); return err },
		"short image": func() error { _, _, _, err := l.Step(img[:7], []int{1}); return err },
	} {
		if err := call(); err == nil {
			t.Errorf("Step, %s: accepted", name)
		}
	}
	for _, y := range []int{2, -1} {
		want := fmt.Sprintf("label %d of sample 0 outside 0..1", y)
		if _, _, _, err := l.Step(img, []int{y}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("label %d of 2 classes: error %v, want %q", y, err, want)
		}
	}
	fresh := tinyLearner(t, DefaultConfig())
	if _, err := fresh.Logits(img, 1); err == nil || !strings.Contains(err.Error(), "Prepare") {
		t.Errorf("Logits before Prepare: %v", err)
	}
	if err := fresh.Prepare(); err != nil {
		t.Fatal(err)
	}
	if got, err := fresh.Logits(img, 1); err != nil || len(got) != 2 {
		t.Fatalf("Logits after Prepare: %v, %v", got, err)
	}
	for name, call := range map[string]func() error{
		"B 0":         func() error { _, err := fresh.Logits(nil, 0); return err },
		"short image": func() error { _, err := fresh.Logits(img[:7], 1); return err },
	} {
		if err := call(); err == nil {
			t.Errorf("Logits, %s: accepted", name)
		}
	}
}

// TestSharedNames: the learner shares its contexts and nothing else.
func TestSharedNames(t *testing.T) {
	l := tinyLearner(t, DefaultConfig())
	if !l.Shared(ParamCtx) || l.Shared("prompt_learner.other") {
		t.Errorf("Shared(%q) %v, Shared(other) %v", ParamCtx, l.Shared(ParamCtx), l.Shared("prompt_learner.other"))
	}
}

// TestGlobalPartShapes: prompt 0 of [2, n, D] is its first n·D values (n
// ≠ D, so the size is a product, not a ratio); a missing tensor, another
// prompt count, or a global part of another shape are refused.
func TestGlobalPartShapes(t *testing.T) {
	own := tensor.Named{ParamCtx: {Shape: []int{2, 2, 3}, Data: []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}}}
	g, err := GlobalPart(own)
	if err != nil {
		t.Fatal(err)
	}
	if d := g[ParamCtx].Data; !tensor.SameShape(g[ParamCtx].Shape, []int{1, 2, 3}) || len(d) != 6 || d[0] != 1 || d[5] != 6 {
		t.Fatalf("global part %v %v", g[ParamCtx].Shape, d)
	}
	for name, p := range map[string]tensor.Named{
		"missing":   {},
		"3 prompts": {ParamCtx: tensor.New(3, 2, 3)},
		"2-D":       {ParamCtx: tensor.New(2, 6)},
	} {
		if _, err := GlobalPart(p); err == nil {
			t.Errorf("GlobalPart, %s: accepted", name)
		}
		if _, err := WithGlobal(p, g); err == nil {
			t.Errorf("WithGlobal, own %s: accepted", name)
		}
	}
	for name, gl := range map[string]tensor.Named{
		"missing":   {},
		"[1, 3, 2]": {ParamCtx: tensor.New(1, 3, 2)},
		"[2, 2, 3]": {ParamCtx: tensor.New(2, 2, 3)},
	} {
		if _, err := WithGlobal(own, gl); err == nil {
			t.Errorf("WithGlobal, global %s: accepted", name)
		}
	}
	next, err := WithGlobal(own, tensor.Named{ParamCtx: {Shape: []int{1, 2, 3}, Data: []float32{0, 0, 0, 0, 0, 0}}})
	if err != nil {
		t.Fatal(err)
	}
	if d := next[ParamCtx].Data; d[5] != 0 || d[6] != 7 || own[ParamCtx].Data[0] != 1 {
		t.Errorf("next %v, own %v", d, own[ParamCtx].Data)
	}
}

// TestNewRefusesNoClasses: no class prompt rows is an error, not a panic.
func TestNewRefusesNoClasses(t *testing.T) {
	mc := clip.Config{EmbedDim: 8,
		Vision: clip.VisionConfig{ImageSize: 8, PatchSize: 4, Width: 8, Layers: 1, Heads: 2, MLPWidth: 16},
		Text:   clip.TextConfig{ContextLength: 8, VocabSize: 30, Width: 8, Layers: 1, Heads: 2, MLPWidth: 16}}
	cfg := DefaultConfig()
	cfg.NCtx = 2
	if _, err := New(clip.New(clip.Random(mc, 1)), []int{}, cfg); err == nil {
		t.Error("no class prompts accepted")
	}
}
