package promptsrc

// Tests closing the survivors of the mutation run
// (docs/mutation/methods_promptsrc.json), on the production API only.

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/tokenizer"
)

// mutWeights loads the tiny CLIP of testdata.
func mutWeights(t *testing.T) *clip.Weights {
	t.Helper()
	w, _, err := checkpoint.Load("../../testdata/clip-tiny/openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// mutTokens is C class prompts "<sot> x x x x <class> <eot>" of the tiny
// CLIP's vocabulary, [C, ctx].
func mutTokens(m *clip.Model, C int) []int {
	ctx, V := m.W.Config.Text.ContextLength, m.W.Config.Text.VocabSize
	tokens := make([]int, C*ctx)
	for c := range C {
		row := tokens[c*ctx:]
		row[0] = V - 2
		for i := 1; i <= 4; i++ {
			row[i] = 5
		}
		row[5], row[6] = 10+c, V-1
	}
	return tokens
}

// mutLearner is a learner of 2 classes on the tiny CLIP with depths 3/2.
func mutLearner(t *testing.T, m *clip.Model, cfg Config) *Learner {
	t.Helper()
	tokens := mutTokens(m, 2)
	l, err := New(m, tokens, tokens, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mutConfig() Config {
	c := DefaultConfig()
	c.DepthText, c.DepthVision, c.Seed = 3, 2, 7
	return c
}

// TestGaussianWeightsOracle: the weights are N(e; μ, σ²) normalised over
// e = 1..E, computed here as 1 / Σ_e' exp(ℓ_e' − ℓ_e) (no shared code),
// also for a mean so far off that the unshifted exponentials underflow;
// a σ that is not positive or a mean that is not finite is refused.
func TestGaussianWeightsOracle(t *testing.T) {
	for _, tc := range []struct {
		E         int
		mean, std float64
	}{{5, 3, 2}, {4, 2.5, 0.7}, {3, 100, 1}, {4, -50, 0.5}, {1, 7, 3}} {
		got, err := GaussianWeights(tc.E, tc.mean, tc.std)
		if err != nil {
			t.Fatal(err)
		}
		ll := func(e int) float64 { z := (float64(e) - tc.mean) / tc.std; return -z * z / 2 }
		for e := 1; e <= tc.E; e++ {
			var s float64
			for f := 1; f <= tc.E; f++ {
				s += math.Exp(ll(f) - ll(e))
			}
			if want := 1 / s; math.Abs(got[e-1]-want) > 1e-12 || math.IsNaN(got[e-1]) {
				t.Errorf("E %d, μ %g, σ %g: w_%d = %v, want %v", tc.E, tc.mean, tc.std, e, got[e-1], want)
			}
		}
	}
	for _, tc := range []struct {
		E         int
		mean, std float64
	}{{3, 2, 0}, {3, 2, -1}, {3, math.NaN(), 1}, {3, math.Inf(1), 1}, {3, 2, math.Inf(1)}, {0, 2, 1}} {
		if _, err := GaussianWeights(tc.E, tc.mean, tc.std); err == nil {
			t.Errorf("E %d, μ %g, σ %g accepted", tc.E, tc.mean, tc.std)
		}
	}
}

// TestValidateBoundaries: every setting's smallest allowed value (and a
// depth equal to the model's blocks) is accepted, the next one out is
// refused naming the key.
func TestValidateBoundaries(t *testing.T) {
	ok := Config{NCtxText: 1, NCtxVision: 1, DepthText: 4, DepthVision: 4}
	if err := ok.Validate(4); err != nil {
		t.Errorf("the smallest settings at depth 4 of 4: %v", err)
	}
	if err := (Config{NCtxText: 1, NCtxVision: 1, DepthText: 1, DepthVision: 1}).Validate(4); err != nil {
		t.Errorf("depths 1: %v", err)
	}
	for key, bad := range map[string]func(c *Config){
		"n_ctx_text":          func(c *Config) { c.NCtxText = 0 },
		"n_ctx_vision":        func(c *Config) { c.NCtxVision = 0 },
		"prompt_depth_text":   func(c *Config) { c.DepthText = 5 },
		"prompt_depth_vision": func(c *Config) { c.DepthVision = 5 },
		"init_std":            func(c *Config) { c.InitStd = -1e-9 },
		"text_loss_weight":    func(c *Config) { c.TextWeight = -1e-9 },
		"image_loss_weight":   func(c *Config) { c.ImageWeight = -1e-9 },
	} {
		c := ok
		bad(&c)
		if err := c.Validate(4); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s out of range: %v", key, err)
		}
	}
	for _, c := range []Config{{NCtxText: 1, NCtxVision: 1, DepthText: 0, DepthVision: 1}, {NCtxText: 1, NCtxVision: 1, DepthText: 1, DepthVision: 0}} {
		if err := c.Validate(0); err == nil || !strings.Contains(err.Error(), "must be at least 1") {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// TestNewOneBlockViT: a ViT of a single block takes prompts of depth 1; an
// image encoder without blocks (or a ResNet) is refused.
func TestNewOneBlockViT(t *testing.T) {
	w := mutWeights(t)
	w.Config.Vision.Layers, w.Vision.Blocks = 1, w.Vision.Blocks[:1]
	m := clip.New(w)
	cfg := mutConfig()
	cfg.DepthText, cfg.DepthVision = 1, 1
	tokens := mutTokens(m, 2)
	if _, err := New(m, tokens, tokens, cfg); err != nil {
		t.Errorf("one-block ViT: %v", err)
	}
	w.Config.Vision.Layers, w.Vision.Blocks = 0, nil
	if _, err := New(clip.New(w), tokens, tokens, cfg); err == nil || !strings.Contains(err.Error(), "needs a ViT") {
		t.Errorf("no image blocks: %v", err)
	}
}

// TestInitDraw: every prompt is drawn N(0, σ²): over all the prompts'
// values the sample standard deviation is σ within 10% and no value is
// beyond 6σ.
func TestInitDraw(t *testing.T) {
	m := clip.New(mutWeights(t))
	cfg := mutConfig()
	cfg.InitStd = 0.02
	l := mutLearner(t, m, cfg)
	var n, ss float64
	for name, p := range l.Params() {
		for _, v := range p.Data {
			if math.Abs(float64(v)) > 6*cfg.InitStd {
				t.Fatalf("%s holds %v, beyond 6σ", name, v)
			}
			ss += float64(v) * float64(v)
			n++
		}
	}
	if sd := math.Sqrt(ss / n); n < 1000 || math.Abs(sd-cfg.InitStd) > 0.1*cfg.InitStd {
		t.Errorf("%v values of standard deviation %v, want %v", n, sd, cfg.InitStd)
	}
}

// TestL1Subgradient: the L1 term is mean|a − b| and its gradient w·sign(a
// − b)/n, 0 where a = b (torch's sign, the authors' F.l1_loss).
func TestL1Subgradient(t *testing.T) {
	a := []float32{1, 2, 3, 4}
	b := []float32{1, 3, 2, 4}
	da := []float32{10, 10, 10, 10}
	if got := l1(da, a, b, 4, 8); got != 0.5 {
		t.Errorf("l1 = %v, want 0.5", got)
	}
	if want := []float32{10, 8, 12, 10}; !equal32(da, want) {
		t.Errorf("gradient %v, want %v", da, want)
	}
}

func equal32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestStepRefuses: a batch with too few prefix values or a label outside
// the classes is an error naming it, from Step and Logits alike; a full
// batch is accepted.
func TestStepRefuses(t *testing.T) {
	m := clip.New(mutWeights(t))
	l := mutLearner(t, m, mutConfig())
	n := 2 * l.T0 * l.Dv
	r := rand.New(rand.NewPCG(3, 4))
	prefix := make([]float32, n)
	for i := range prefix {
		prefix[i] = float32(r.NormFloat64())
	}
	short := prefix[: n-1 : n-1]
	if _, _, _, err := l.Step(short, []int{0, 1}); err == nil || !strings.Contains(err.Error(), "prefix values for 2 images") {
		t.Errorf("Step on a short batch: %v", err)
	}
	if _, err := l.Logits(short, 2); err == nil || !strings.Contains(err.Error(), "prefix values for 2 images") {
		t.Errorf("Logits on a short batch: %v", err)
	}
	for _, y := range []int{2, -1} {
		_, _, _, err := l.Step(prefix, []int{0, y})
		if want := "label " + itoa(y) + " of sample 1 outside 0..1"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("label %d: %v, want %q", y, err, want)
		}
	}
	if _, _, _, err := l.Step(prefix, []int{1, 0}); err != nil {
		t.Errorf("a full batch: %v", err)
	}
	if err := l.Prepare(); err != nil {
		t.Fatal(err)
	}
	if out, err := l.Logits(prefix, 2); err != nil || len(out) != 4 {
		t.Errorf("Logits of a full batch: %d values, %v", len(out), err)
	}
}

func itoa(i int) string {
	if i < 0 {
		return "-" + itoa(-i)
	}
	return string(rune('0' + i))
}

// TestDepth: a prompt depth up to the model's blocks is accepted, one more
// refused naming the key; settings that fail validation are refused.
func TestDepth(t *testing.T) {
	s := Method{}.DefaultConfig().(*Settings)
	s.PromptDepthText, s.PromptDepthVision = 4, 4
	if d, err := (Method{}).Depth(s, 4); err != nil || d != 0 {
		t.Errorf("depths 4 of 4: %d, %v", d, err)
	}
	for key, set := range map[string]func(){
		"promptsrc.prompt_depth_text 5":   func() { s.PromptDepthText = 5 },
		"promptsrc.prompt_depth_vision 5": func() { s.PromptDepthVision = 5 },
		"n_ctx_text 0":                    func() { s.NCtxText = 0 },
	} {
		s.PromptDepthText, s.PromptDepthVision, s.NCtxText = 4, 4, 4
		set()
		if _, err := (Method{}).Depth(s, 4); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: %v", key, err)
		}
	}
}

// TestFitModel: on a model of fewer blocks a depth keeps its share of
// ViT-B/16's 12 (round(d/12·layers), at least 1), a depth that fits stays,
// and a model without blocks changes nothing.
func TestFitModel(t *testing.T) {
	for _, tc := range []struct{ text, vision, layers, wantText, wantVision, notes int }{
		{9, 9, 4, 3, 3, 2},
		{9, 4, 4, 3, 4, 1},
		{1, 12, 2, 1, 2, 1},
		{13, 2, 6, 6, 2, 1},
		{9, 9, 0, 9, 9, 0},
		{9, 2, 1, 1, 1, 2},
	} {
		s := &Settings{PromptDepthText: tc.text, PromptDepthVision: tc.vision}
		notes := s.FitModel(tc.layers)
		if s.PromptDepthText != tc.wantText || s.PromptDepthVision != tc.wantVision || len(notes) != tc.notes {
			t.Errorf("%d/%d on %d blocks: %d/%d (%q), want %d/%d", tc.text, tc.vision, tc.layers, s.PromptDepthText, s.PromptDepthVision, notes, tc.wantText, tc.wantVision)
		}
	}
}

// TestCheckTemplates: every anchor template must hold the class
// placeholder {} once; a bad entry is refused naming the key and entry.
func TestCheckTemplates(t *testing.T) {
	s := Method{}.DefaultConfig().(*Settings)
	s.Templates = []string{"a photo of a {}.", "a {} of a {}."}
	if err := config.CheckSection("promptsrc", s); err == nil || !strings.Contains(err.Error(), "promptsrc.templates") || !strings.Contains(err.Error(), "entry 1") {
		t.Errorf("two placeholders: %v", err)
	}
	s.Templates = s.Templates[:1]
	if err := config.CheckSection("promptsrc", s); err != nil {
		t.Errorf("one placeholder: %v", err)
	}
}

// mutEnv is a run of one client on 2 classes ("big_cat", "dog", the space
// listing them in the order dog, big cat) with a character tokenizer, at
// the first block's input.
func mutEnv(t *testing.T) *methods.Env {
	t.Helper()
	m := clip.New(mutWeights(t))
	task := &protocol.Task{Dataset: &dataset.Dataset{Classes: []string{"big_cat", "dog"}},
		Spaces:  []protocol.Space{{Name: "all", Classes: []int{1, 0}}},
		Clients: []protocol.ClientTask{{ID: 0, TrainSpace: 0}}}
	return &methods.Env{Model: m, Tok: tokenizer.FromMerges(nil), Task: task, Start: 0, Seed: 1}
}

// TestTemplateTokens: the anchor prompts are every template filled with
// every class of the space (template-major, "_" read as a space),
// tokenised here apart from the method; no tokenizer or a space outside
// the task is refused.
func TestTemplateTokens(t *testing.T) {
	env := mutEnv(t)
	s := &Settings{Templates: []string{"a {}.", "the {}!"}}
	got, err := s.templateTokens(env, 0)
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for _, text := range []string{"a dog.", "a big cat.", "the dog!", "the big cat!"} {
		ids, err := env.Tok.Tokenize(text, env.Model.W.Config.Text.ContextLength, false)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, ids...)
	}
	if !slices.Equal(got, want) {
		t.Errorf("template rows differ from the tokenised \"a dog.\", \"a big cat.\", \"the dog!\", \"the big cat!\"")
	}
	for _, space := range []int{1, -1} {
		if _, err := s.templateTokens(env, space); err == nil || !strings.Contains(err.Error(), "label space") {
			t.Errorf("space %d: %v", space, err)
		}
	}
	long := &Settings{Templates: []string{strings.Repeat("x", 80) + " {}."}}
	if _, err := long.templateTokens(env, 0); err == nil || !strings.Contains(err.Error(), "promptsrc.templates") {
		t.Errorf("a template longer than the context: %v", err)
	}
	env.Tok = nil
	if _, err := s.templateTokens(env, 0); err == nil || !strings.Contains(err.Error(), "no tokenizer") {
		t.Errorf("no tokenizer: %v", err)
	}
}

// TestBuildPrompts: Build makes one client per task client; an n_ctx_text
// whose class prompts do not fit the context, or a setting out of range,
// is refused naming the key.
func TestBuildPrompts(t *testing.T) {
	env := mutEnv(t)
	sec := func(n int) *Settings {
		s := Method{}.DefaultConfig().(*Settings)
		s.PromptDepthText, s.PromptDepthVision, s.NCtxText, s.GPAStd = 3, 3, n, 0
		s.Templates = []string{"a {}."}
		return s
	}
	plan, err := (Method{}).Build(env, sec(4))
	if err != nil || plan == nil || len(plan.Clients) != 1 {
		t.Fatalf("Build: %v, %v", plan, err)
	}
	if _, err := (Method{}).Build(env, sec(70)); err == nil || !strings.Contains(err.Error(), "promptsrc.n_ctx_text") {
		t.Errorf("n_ctx_text 70 in a %d-token context: %v", env.Model.W.Config.Text.ContextLength, err)
	}
	if _, err := (Method{}).Build(env, sec(0)); err == nil || !strings.Contains(err.Error(), "n_ctx_text 0") {
		t.Errorf("n_ctx_text 0: %v", err)
	}
	if err := fitPrompts(&methods.Env{}, 70); err != nil {
		t.Errorf("fitPrompts without a tokenizer: %v", err)
	}
}

// TestPredictor: a saved site without the context is refused naming it; a
// learner's prompts score B images against the classes, [B, C].
func TestPredictor(t *testing.T) {
	env := mutEnv(t)
	pe := methods.PredictEnv{Model: env.Model, Tok: env.Tok}
	sec := Method{}.DefaultConfig().(*Settings)
	sec.PromptDepthText, sec.PromptDepthVision = 3, 3
	if _, err := (Method{}).Predictor(pe, sec, tensor.Named{}); err == nil || !strings.Contains(err.Error(), ParamCtx) {
		t.Errorf("no context: %v", err)
	}
	tokens := mutTokens(env.Model, 2)
	l, err := New(env.Model, tokens, tokens, sec.config(5))
	if err != nil {
		t.Fatal(err)
	}
	p, err := (Method{}).Predictor(pe, sec, l.Params())
	if err != nil {
		t.Fatal(err)
	}
	S := env.Model.W.Config.Vision.ImageSize
	out, err := p.Logits(make([]float32, 2*3*S*S), 2, []string{"cat", "dog", "owl"})
	if err != nil || len(out) != 6 {
		t.Fatalf("Logits: %d values, %v; want 6", len(out), err)
	}
	for _, v := range out {
		if math.IsNaN(float64(v)) {
			t.Fatalf("Logits %v", out)
		}
	}
}
