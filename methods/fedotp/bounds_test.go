package fedotp

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/ot"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestConfigBoundaries: the smallest settings Validate allows are allowed
// (n_ctx 1, one prompt, avg_prompt 0 and avg_prompt = num_prompt,
// init_std 0, no position), the values just outside are refused naming the
// key, and so is an unknown class-token position.
func TestConfigBoundaries(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"n_ctx 1":                   func(c *Config) { c.NCtx = 1 },
		"num_prompt 1, avg 1":       func(c *Config) { c.NumPrompt, c.AvgPrompt = 1, 1 },
		"avg_prompt 0":              func(c *Config) { c.AvgPrompt = 0 },
		"avg_prompt = num_prompt":   func(c *Config) { c.NumPrompt, c.AvgPrompt = 3, 3 },
		"init_std 0":                func(c *Config) { c.InitStd = 0 },
		"class_token_position \"\"": func(c *Config) { c.Position = "" },
		"middle":                    func(c *Config) { c.Position = "middle" },
	} {
		c := DefaultConfig()
		mod(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
	for key, mod := range map[string]func(*Config){
		"avg_prompt":           func(c *Config) { c.AvgPrompt = -1 },
		"init_std":             func(c *Config) { c.InitStd = -1e-9 },
		"class_token_position": func(c *Config) { c.Position = "diagonal" },
	} {
		c := DefaultConfig()
		mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: error %v, want one naming it", key, err)
		}
	}
}

// TestSettingsCheckBounds: the config section accepts its defaults,
// avg_prompt = num_prompt and an empty class_token_position; it refuses
// avg_prompt > num_prompt and an unknown position, naming the key.
func TestSettingsCheckBounds(t *testing.T) {
	for name, mod := range map[string]func(*Settings){
		"defaults":                  func(*Settings) {},
		"avg_prompt = num_prompt":   func(s *Settings) { s.AvgPrompt = s.NumPrompt },
		"class_token_position \"\"": func(s *Settings) { s.ClassTokenPosition = "" },
		"front":                     func(s *Settings) { s.ClassTokenPosition = "front" },
	} {
		s := Method{}.DefaultConfig().(*Settings)
		mod(s)
		if err := config.CheckSection("fedotp", s); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
	for key, mod := range map[string]func(*Settings){
		"avg_prompt":           func(s *Settings) { s.AvgPrompt = s.NumPrompt + 1 },
		"class_token_position": func(s *Settings) { s.ClassTokenPosition = "diagonal" },
	} {
		s := Method{}.DefaultConfig().(*Settings)
		mod(s)
		if err := config.CheckSection("fedotp", s); err == nil || !strings.Contains(err.Error(), "fedotp."+key) {
			t.Errorf("%s: error %v, want one naming fedotp.%s", key, err, key)
		}
	}
}

// tinyModel is a random CLIP of context length 8 with 2-class prompt rows
// "SOT X X class EOT" (n_ctx 2).
func tinyModel() (*clip.Model, []int) {
	cfg := clip.Config{EmbedDim: 8,
		Vision: clip.VisionConfig{ImageSize: 8, PatchSize: 4, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16},
		Text:   clip.TextConfig{ContextLength: 8, VocabSize: 30, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16}}
	tokens := make([]int, 2*8)
	for c := range 2 {
		copy(tokens[c*8:], []int{28, 3, 3, 10 + c, 29})
	}
	return clip.New(clip.Random(cfg, 1)), tokens
}

// TestInitDraw: the contexts start as draws of N(0, init_std²): their
// sample standard deviation is init_std within 15% (256 draws), and
// init_std 0 gives zeros.
func TestInitDraw(t *testing.T) {
	m, tokens := tinyModel()
	cfg := DefaultConfig()
	cfg.NCtx, cfg.NumPrompt, cfg.AvgPrompt, cfg.Seed = 2, 16, 1, 5
	l, err := New(m, tokens, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ss float64
	for _, v := range l.ctx.Data {
		ss += float64(v) * float64(v)
	}
	if sd := math.Sqrt(ss / float64(len(l.ctx.Data))); math.Abs(sd-cfg.InitStd) > 0.15*cfg.InitStd {
		t.Errorf("contexts' standard deviation %g, want init_std %g", sd, cfg.InitStd)
	}
	cfg.InitStd = 0
	if l, err = New(m, tokens, cfg); err != nil {
		t.Fatal(err)
	}
	for i, v := range l.ctx.Data {
		if v != 0 {
			t.Fatalf("init_std 0: context [%d] = %g", i, v)
		}
	}
}

// TestStepRefusesLabels: a label outside 0..C−1 (C itself, −1) is an error
// naming it, not a panic or a silent loss.
func TestStepRefusesLabels(t *testing.T) {
	m, tokens := tinyModel()
	cfg := DefaultConfig()
	cfg.NCtx = 2
	l, err := New(m, tokens, cfg)
	if err != nil {
		t.Fatal(err)
	}
	T := m.W.Config.Vision.Tokens()
	img := make([]float32, T*l.E)
	for i := range img {
		img[i] = float32(i%5) - 2
	}
	if _, _, err := l.Step(img, []int{1}); err != nil {
		t.Fatalf("label 1 of 2: %v", err)
	}
	for _, y := range []int{l.C, -1} {
		if _, _, err := l.Step(img, []int{y}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("label %d of sample 0 outside 0..1", y)) {
			t.Errorf("label %d of %d classes: error %v, want one naming the label and the range 0..1", y, l.C, err)
		}
	}
}

// TestNewRefusesNoClasses: no class prompt rows is an error, not a panic.
func TestNewRefusesNoClasses(t *testing.T) {
	m, _ := tinyModel()
	cfg := DefaultConfig()
	cfg.NCtx = 2
	if _, err := New(m, []int{}, cfg); err == nil {
		t.Error("no class prompts accepted")
	}
}

// TestHeadSingletonShapes: the head accepts its smallest shapes (one
// image of one patch, one prompt, one class, width 1). Width 1 makes every
// similarity ±1 and one patch against one prompt makes the plan the whole
// transported mass (1 for Sinkhorn, top_percent for COT), so the logit is
// e^s·mass·sign.
func TestHeadSingletonShapes(t *testing.T) {
	for _, c := range []struct {
		cfg  ot.Config
		mass float64
	}{
		{ot.Config{Method: ot.Sinkhorn, Eps: 0.1, Thresh: 1e-6, MaxIter: 100}, 1},
		{ot.Config{Method: ot.COT, Eps: 0.1, Thresh: 1e-6, MaxIter: 100, TopPercent: 0.8}, 0.8},
	} {
		h := Head{OT: c.cfg}
		// class token 5 (unused), patch −3; text 2: similarity −1
		logits, err := h.Forward([]float32{5, -3}, 1, 2, []float32{2}, 1, 1, 1, 0.5)
		if err != nil {
			t.Fatalf("%s: %v", c.cfg.Method, err)
		}
		want := -math.Exp(0.5) * c.mass
		if len(logits) != 1 || math.Abs(float64(logits[0])-want) > 1e-5 {
			t.Errorf("%s: logits %v, want [%g]", c.cfg.Method, logits, want)
		}
	}
}

// TestGlobalPartBounds: the server may average none of the prompts
// (avg_prompt 0: an empty global part) or all of them; more than the
// client holds, or a negative count, is refused. A global part of every
// prompt replaces them all.
func TestGlobalPartBounds(t *testing.T) {
	own := tensor.Named{ParamCtx: {Shape: []int{2, 1, 2}, Data: []float32{1, 2, 3, 4}}}
	g, err := GlobalPart(own, 0)
	if err != nil {
		t.Fatalf("avg 0: %v", err)
	}
	if s := g[ParamCtx].Shape; !tensor.SameShape(s, []int{0, 1, 2}) || len(g[ParamCtx].Data) != 0 {
		t.Errorf("avg 0: global part %v %v", s, g[ParamCtx].Data)
	}
	all, err := GlobalPart(own, 2)
	if err != nil {
		t.Fatalf("avg 2 of 2: %v", err)
	}
	if d := all[ParamCtx].Data; !tensor.SameShape(all[ParamCtx].Shape, []int{2, 1, 2}) || d[0] != 1 || d[3] != 4 {
		t.Errorf("avg 2 of 2: global part %v %v", all[ParamCtx].Shape, d)
	}
	for _, avg := range []int{3, -1} {
		if _, err := GlobalPart(own, avg); err == nil {
			t.Errorf("avg %d of 2 accepted", avg)
		}
	}
	next, err := WithGlobal(own, tensor.Named{ParamCtx: {Shape: []int{2, 1, 2}, Data: []float32{5, 6, 7, 8}}})
	if err != nil {
		t.Fatalf("a global part of both prompts: %v", err)
	}
	if d := next[ParamCtx].Data; d[0] != 5 || d[3] != 8 {
		t.Errorf("a global part of both prompts: next %v", d)
	}
}

// TestStepFixtureShapes: every tensor StepFromFile returns has the shape of
// the reference's (the plan [B·C, M, N] among them).
func TestStepFixtureShapes(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, "../../testdata/fedotp/init.safetensors")
	ref, meta := paritytest.Read(t, "../../testdata/fedotp/step.safetensors")
	batch := tensor.Named{"tokens": ref["tokens"], "labels": ref["labels"], "images": ref["images"]}
	out, err := StepFromFile(m, init, batch, meta)
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range out {
		want, ok := ref[name]
		if !ok {
			t.Errorf("%s: not in the reference", name)
			continue
		}
		if !tensor.SameShape(got.Shape, want.Shape) {
			t.Errorf("%s: shape %v, reference %v", name, got.Shape, want.Shape)
		}
	}
}
