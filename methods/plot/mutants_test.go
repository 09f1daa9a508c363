package plot

// Tests closing the survivors of the mutation run
// (docs/mutation/methods_plot.json), on the production API only.

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/tokenizer"
)

// mutModel loads the tiny CLIP of testdata.
func mutModel(t *testing.T) *clip.Model {
	t.Helper()
	w, _, err := checkpoint.Load("../../testdata/clip-tiny/openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	return clip.New(w)
}

// mutLearner is a learner of 2 classes (2 prompts of 2 context tokens) on
// the tiny CLIP, and the every-token features [3, 1+4, E] of 3 images.
func mutLearner(t *testing.T) (*Learner, []float32) {
	t.Helper()
	m := mutModel(t)
	ctx, V := m.W.Config.Text.ContextLength, m.W.Config.Text.VocabSize
	tokens := make([]int, 2*ctx)
	for c := range 2 {
		row := tokens[c*ctx:]
		row[0], row[1], row[2], row[3], row[4] = V-2, 5, 5, 10+c, V-1
	}
	cfg := DefaultConfig()
	cfg.NCtx, cfg.N, cfg.Seed = 2, 2, 9
	l, err := New(m, tokens, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	img := make([]float32, 3*5*l.E)
	for i := range img {
		img[i] = float32(r.NormFloat64())
	}
	return l, img
}

// TestValidateBoundaries: the smallest allowed value of every setting is
// accepted, the next one out refused naming the setting.
func TestValidateBoundaries(t *testing.T) {
	ok := DefaultConfig()
	ok.NCtx, ok.N, ok.InitStd = 1, 1, 0
	if err := ok.Validate(); err != nil {
		t.Errorf("n_ctx 1, n_prompts 1, init_std 0: %v", err)
	}
	for key, bad := range map[string]func(c *Config){
		"n_ctx":     func(c *Config) { c.NCtx = 0 },
		"n_prompts": func(c *Config) { c.N = 0 },
		"init_std":  func(c *Config) { c.InitStd = -1e-9 },
	} {
		c := ok
		bad(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: %v", key, err)
		}
	}
	c := ok
	c.InitStd = math.Inf(1)
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "init_std") {
		t.Errorf("init_std +Inf: %v", err)
	}
}

// TestStepLabels: a label outside the classes is refused naming it and
// the classes' range.
func TestStepLabels(t *testing.T) {
	l, img := mutLearner(t)
	for y, s := range map[int]string{2: "2", -1: "-1"} {
		_, _, err := l.Step(img, []int{0, 1, y})
		if want := "plot: label " + s + " of sample 2 outside 0..1"; err == nil || err.Error() != want {
			t.Errorf("label %d: %v, want %q", y, err, want)
		}
	}
}

// TestLogitsOneImage: a single image is scored, by the learner and by the
// client's learner after Prepare, with the same logits as in a batch of
// three (the OT head scores each image alone); no image is refused.
func TestLogitsOneImage(t *testing.T) {
	l, img := mutLearner(t)
	all, err := l.Logits(img, 3)
	if err != nil {
		t.Fatal(err)
	}
	all = append([]float32(nil), all...)
	one, err := l.Logits(img[:5*l.E], 1)
	if err != nil || len(one) != 2 || math.Abs(float64(one[0]-all[0])) > 1e-5 || math.Abs(float64(one[1]-all[1])) > 1e-5 {
		t.Errorf("Logits of one image: %v (%v), want %v", one, err, all[:2])
	}
	s := spaceLearner{l}
	if err := s.Prepare(); err != nil {
		t.Fatal(err)
	}
	one, err = s.Logits(img[:5*l.E], 1)
	if err != nil || len(one) != 2 || math.Abs(float64(one[0]-all[0])) > 1e-5 {
		t.Errorf("the client learner's Logits of one image: %v (%v), want %v", one, err, all[:2])
	}
	if _, err := l.Logits(nil, 0); err == nil {
		t.Errorf("Logits of no image accepted")
	}
	if _, err := s.Logits(nil, 0); err == nil {
		t.Errorf("the client learner's Logits of no image accepted")
	}
}

// TestPredictorSettings: valid settings give a predictor, invalid ones are
// refused naming the setting.
func TestPredictorSettings(t *testing.T) {
	pe := methods.PredictEnv{Model: mutModel(t), Tok: tokenizer.FromMerges(nil)}
	p, err := (Method{}).Predictor(pe, Method{}.DefaultConfig(), nil)
	if err != nil || p == nil {
		t.Errorf("default settings: %v, %v", p, err)
	}
	bad := Method{}.DefaultConfig().(*Settings)
	bad.NCtx = 0
	if _, err := (Method{}).Predictor(pe, bad, nil); err == nil || !strings.Contains(err.Error(), "n_ctx") {
		t.Errorf("n_ctx 0: %v", err)
	}
}
