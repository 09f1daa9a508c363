package prograd

// Tests closing the survivors of the mutation run
// (docs/mutation/methods_prograd.json), on the production API only.

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
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

// mutTokens is C class prompts "<sot> x…x <class> <eot>" (n context
// placeholders) of the tiny CLIP's vocabulary, [C, ctx], and C teacher
// prompts "<sot> y <class> <eot>".
func mutTokens(m *clip.Model, C, n int) (tokens, template []int) {
	ctx, V := m.W.Config.Text.ContextLength, m.W.Config.Text.VocabSize
	tokens, template = make([]int, C*ctx), make([]int, C*ctx)
	for c := range C {
		row := tokens[c*ctx:]
		row[0] = V - 2
		for i := 1; i <= n; i++ {
			row[i] = 5
		}
		row[n+1], row[n+2] = 10+c, V-1
		tr := template[c*ctx:]
		tr[0], tr[1], tr[2], tr[3] = V-2, 7, 10+c, V-1
	}
	return tokens, template
}

// TestValidateBoundaries: the smallest allowed value of every setting is
// accepted, the next one out refused naming the setting.
func TestValidateBoundaries(t *testing.T) {
	ok := Config{NCtx: 1, T: 1e-3, Lambda: 0, InitStd: 0}
	if err := ok.Validate(); err != nil {
		t.Errorf("n_ctx 1, T 1e-3, λ 0, init_std 0: %v", err)
	}
	for key, bad := range map[string]func(c *Config){
		"n_ctx":    func(c *Config) { c.NCtx = 0 },
		"T 0":      func(c *Config) { c.T = 0 },
		"T +Inf":   func(c *Config) { c.T = math.Inf(1) },
		"lambda":   func(c *Config) { c.Lambda = -1e-9 },
		"lambda +": func(c *Config) { c.Lambda = math.Inf(1) },
		"init_std": func(c *Config) { c.InitStd = -1e-9 },
	} {
		c := ok
		bad(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), strings.Fields(key)[0]) {
			t.Errorf("%s: %v", key, err)
		}
	}
}

// TestCheck: the section refuses a class position other than end and a
// temperature that is not positive, naming the key.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		set  func(s *Settings)
		want string // "" accepted
	}{
		{func(s *Settings) {}, ""},
		{func(s *Settings) { s.ClassTokenPosition = "end" }, ""},
		{func(s *Settings) { s.ClassTokenPosition = "front" }, "prograd.class_token_position"},
		{func(s *Settings) { s.T = 0 }, "prograd.T"},
		{func(s *Settings) { s.T = 1e-3 }, ""},
	} {
		s := Method{}.DefaultConfig().(*Settings)
		tc.set(s)
		err := config.CheckSection("prograd", s)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", s, err, tc.want)
		}
	}
}

// TestCtxInit: the ctx_init words' frozen token embeddings (read here from
// the weights) fill the last context rows, the others zero; words of
// exactly n_ctx tokens fill it whole, more are refused; without a
// tokenizer the words are ignored (a random context).
func TestCtxInit(t *testing.T) {
	m := mutModel(t)
	tok := tokenizer.FromMerges(nil) // one symbol per character: "ab" is 2 tokens
	ids := tok.Encode("ab")
	D := m.W.Config.Text.Width
	for _, n := range []int{2, 3} {
		s := &Settings{NCtx: n, CtxInit: "ab", T: 1, Lambda: 1}
		cfg, err := s.config(m, tok, 1)
		if err != nil {
			t.Fatalf("n_ctx %d: %v", n, err)
		}
		want := make([]float32, n*D)
		for i, id := range ids {
			copy(want[(n-len(ids)+i)*D:], m.Text.W.TokenEmb[id*D:(id+1)*D])
		}
		if len(ids) != 2 || !equal32(cfg.InitCtx, want) {
			t.Errorf("n_ctx %d: the context init is not the words' embeddings after %d zero rows", n, n-2)
		}
	}
	s := &Settings{NCtx: 1, CtxInit: "ab", T: 1, Lambda: 1}
	if _, err := s.config(m, tok, 1); err == nil || !strings.Contains(err.Error(), `ctx_init "ab" has 2 tokens, more than n_ctx 1`) {
		t.Errorf("2 words' tokens in n_ctx 1: %v", err)
	}
	s.NCtx = 4
	cfg, err := s.config(m, nil, 1)
	if err != nil || cfg.InitCtx != nil {
		t.Errorf("no tokenizer: %v, init %v; want a random context", err, cfg.InitCtx)
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

// mutLearner is a learner of 2 classes with 2 context tokens and 3 image
// features.
func mutLearner(t *testing.T, T float64) (*Learner, []float32) {
	t.Helper()
	m := mutModel(t)
	tokens, template := mutTokens(m, 2, 2)
	l, err := New(m, tokens, template, Config{NCtx: 2, T: T, Lambda: 1, InitStd: 0.02, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	img := make([]float32, 3*l.E)
	for i := range img {
		img[i] = float32(r.NormFloat64())
	}
	return l, img
}

// TestStepLabels: a label outside the classes is refused naming it and
// the classes' range.
func TestStepLabels(t *testing.T) {
	l, img := mutLearner(t, 1)
	for _, y := range []int{2, -1} {
		_, _, _, err := l.Step(img, []int{0, 1, y})
		want := "prograd: label " + map[int]string{2: "2", -1: "-1"}[y] + " of sample 2 outside 0..1"
		if err == nil || err.Error() != want {
			t.Errorf("label %d: %v, want %q", y, err, want)
		}
	}
}

// TestDistillLowTemperature: at a low distillation temperature (logits/T
// in the thousands) the soft-target loss is still T²·mean_b Σ_c
// −softmax(zs/T)_c·log softmax(logits/T)_c, recomputed here in float64
// from the step's logits and zero-shot logits [B, C].
func TestDistillLowTemperature(t *testing.T) {
	const T = 0.01
	l, img := mutLearner(t, T)
	_, terms, logits, err := l.Step(img, []int{0, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	zs := l.Intermediates()["zs_logits"]
	if len(zs.Shape) != 2 || zs.Shape[0] != 3 || zs.Shape[1] != 2 {
		t.Fatalf("zs_logits of shape %v, want [3 2]", zs.Shape)
	}
	lse := func(row []float32) float64 {
		a, b := float64(row[0])/T, float64(row[1])/T
		hi, lo := math.Max(a, b), math.Min(a, b)
		return hi + math.Log1p(math.Exp(lo-hi))
	}
	var want float64
	for b := range 3 {
		lr, zr := logits[2*b:2*b+2], zs.Data[2*b:2*b+2]
		for c := range 2 {
			p := math.Exp(float64(zr[c])/T - lse(zr))
			want -= p * (float64(lr[c])/T - lse(lr))
		}
	}
	want *= T * T / 3
	if got := terms["loss_kl"]; math.IsNaN(got) || math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Errorf("loss_kl %v at T %g, want %v", got, T, want)
	}
}

// TestProjectCosine: a conflicting pair is projected as g = gXe − λ·(gXe·gKd /
// |gKd|²)·gKd; a zero gradient on either side gives cosine 0 (not NaN) and
// no projection.
func TestProjectCosine(t *testing.T) {
	g := make([]float32, 2)
	cos, proj := project(g, []float32{1, 0}, []float32{-1, 1}, 1)
	if !proj || math.Abs(cos+1/math.Sqrt2) > 1e-12 || !equal32(g, []float32{0.5, 0.5}) {
		t.Errorf("conflict: g %v, cos %v, projected %v; want [0.5 0.5], −0.7071, true", g, cos, proj)
	}
	for _, tc := range [][2][]float32{{{1, 2}, {0, 0}}, {{0, 0}, {1, 2}}} {
		cos, proj := project(g, tc[0], tc[1], 1)
		if cos != 0 || proj || !equal32(g, tc[0]) {
			t.Errorf("gXe %v, gKd %v: g %v, cos %v, projected %v; want gXe, 0, false", tc[0], tc[1], g, cos, proj)
		}
	}
}

// TestPredictor: a saved site without a two-dimensional context is
// refused naming the tensor; a saved context scores B images against the
// classes, [B, C].
func TestPredictor(t *testing.T) {
	m := mutModel(t)
	pe := methods.PredictEnv{Model: m, Tok: tokenizer.FromMerges(nil)}
	sec := Method{}.DefaultConfig()
	for _, saved := range []tensor.Named{{}, {ParamCtx: tensor.New(2 * m.W.Config.Text.Width)}} {
		if _, err := (Method{}).Predictor(pe, sec, saved); err == nil || !strings.Contains(err.Error(), ParamCtx) {
			t.Errorf("saved %v: %v", saved, err)
		}
	}
	ctx := tensor.New(2, m.W.Config.Text.Width)
	for i := range ctx.Data {
		ctx.Data[i] = float32(i%7) * 0.01
	}
	p, err := (Method{}).Predictor(pe, sec, tensor.Named{ParamCtx: ctx})
	if err != nil {
		t.Fatal(err)
	}
	S := m.W.Config.Vision.ImageSize
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

// TestTeacherPrompts: a label space's learner takes the run's template
// prompts of that space as its teacher; a space the task does not have is
// an error naming it.
func TestTeacherPrompts(t *testing.T) {
	m := mutModel(t)
	tokens, template := mutTokens(m, 2, 2)
	env := &methods.Env{Model: m, Task: &protocol.Task{Spaces: []protocol.Space{{Name: "all", Classes: []int{0, 1}}}},
		SpaceTokenRows: map[int][]int{0: template}}
	s := Method{}.DefaultConfig().(*Settings)
	s.NCtx, s.CtxInit = 2, ""
	spec, err := clientSpec(env, s)
	if err != nil {
		t.Fatal(err)
	}
	l, err := spec.NewLearner(0, tokens)
	if err != nil {
		t.Fatalf("space 0: %v", err)
	}
	want, err := New(m, tokens, template, Config{NCtx: 2, T: 1, Lambda: 1, InitStd: 0.02})
	if err != nil {
		t.Fatal(err)
	}
	if !equal32(l.(*Learner).teacher, want.teacher) {
		t.Errorf("the learner's teacher is not the template's")
	}
	if _, err := spec.NewLearner(1, tokens); err == nil || !strings.Contains(err.Error(), "prograd: label space 1") {
		t.Errorf("space 1: %v", err)
	}
}
