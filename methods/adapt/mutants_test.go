package adapt

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

// The tests of this file kill mutants `make mutants` found alive in
// methods/adapt (issue 35).

// TestConfigValidateBoundaries: one domain, n_ctx 1, zero standard
// deviations and λ, and one AdaLN layer are accepted (AdaLN off needs no
// layers); the values just past them, and infinite ones in pairs, are
// refused naming the setting.
func TestConfigValidateBoundaries(t *testing.T) {
	base := Config{Domains: 2, NCtx: 4, InitStd: 0.02, VisualStd: 0.02, Tau: 0.1, Lambda: 1}
	for name, mod := range map[string]func(*Config){
		"one domain":      func(c *Config) { c.Domains = 1 },
		"n_ctx 1":         func(c *Config) { c.NCtx = 1 },
		"zeros":           func(c *Config) { c.InitStd, c.VisualStd, c.Lambda = 0, 0, 0 },
		"one AdaLN layer": func(c *Config) { c.AdaLN, c.AdaLNLayers = true, 1 },
		"no AdaLN":        func(c *Config) { c.AdaLN, c.AdaLNLayers = false, 0 },
	} {
		c := base
		mod(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v, want accepted", name, err)
		}
	}
	inf := math.Inf(1)
	for _, bad := range []struct {
		want string
		mod  func(*Config)
	}{
		{"domains", func(c *Config) { c.Domains = 0 }},
		{"n_ctx", func(c *Config) { c.NCtx = 0 }},
		{"tau", func(c *Config) { c.Tau = 0 }},
		{"init_std", func(c *Config) { c.InitStd = -1e-9 }},
		{"visual_init_std", func(c *Config) { c.VisualStd = -1e-9 }},
		{"lambda", func(c *Config) { c.Lambda = -1e-9 }},
		{"init_std", func(c *Config) { c.InitStd, c.VisualStd = inf, inf }},
		{"lambda", func(c *Config) { c.VisualStd, c.Lambda = inf, inf }},
		{"adaln_layers", func(c *Config) { c.AdaLN, c.AdaLNLayers = true, 0 }},
	} {
		c := base
		bad.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: error %v, want one naming %s", c, err, bad.want)
		}
	}
}

// TestInitParamsDraw: InitParams holds exactly n text prompts [n_ctx, Dt],
// the visual prompts [n, Dv] and, with AdaLN, L zero layers [2E, E] and
// [2E]; the prompts are N(0, σ²) (sample std within sampling error), one
// independent draw per domain.
func TestInitParamsDraw(t *testing.T) {
	c := Config{Domains: 3, NCtx: 8, InitStd: 0.02, VisualStd: 0.5, Tau: 0.1, Lambda: 1, AdaLN: true, AdaLNLayers: 2, Seed: 7}
	const dt, dv, e = 64, 48, 6
	p := InitParams(c, dt, dv, e)
	if len(p) != 3+1+2*2 {
		t.Errorf("%d tensors, want 3 text prompts, the visual prompts and 2 AdaLN layers", len(p))
	}
	std := func(x []float32) float64 {
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		return math.Sqrt(ss / float64(len(x)))
	}
	for i := 0; i < c.Domains; i++ {
		tp := p[TextName(i)]
		if tp == nil || len(tp.Shape) != 2 || tp.Shape[0] != 8 || tp.Shape[1] != dt {
			t.Fatalf("%s: %v, want [8 %d]", TextName(i), tp, dt)
		}
		if s, n := std(tp.Data), float64(len(tp.Data)); math.Abs(s-0.02) > 5*0.02/math.Sqrt(2*n) {
			t.Errorf("%s: sample std %.4g, want 0.02", TextName(i), s)
		}
		if i > 0 && tp.Data[0] == p[TextName(0)].Data[0] {
			t.Errorf("%s starts as %s does", TextName(i), TextName(0))
		}
	}
	v := p[ParamVisual]
	if len(v.Shape) != 2 || v.Shape[0] != 3 || v.Shape[1] != dv {
		t.Fatalf("visual prompts %v, want [3 %d]", v.Shape, dv)
	}
	if s, n := std(v.Data), float64(len(v.Data)); math.Abs(s-0.5) > 5*0.5/math.Sqrt(2*n) {
		t.Errorf("visual prompts: sample std %.4g, want 0.5", s)
	}
	for l := 0; l < 2; l++ {
		w, b := adaLNNames(l)
		if p[w] == nil || len(p[w].Data) != 2*e*e || p[b] == nil || len(p[b].Data) != 2*e || std(p[w].Data) != 0 || std(p[b].Data) != 0 {
			t.Errorf("AdaLN layer %d: %v %v, want zero [2E, E] and [2E]", l, p[w], p[b])
		}
	}
}

// smallLearner is a learner of n domains on methodtest.PromptModel with its
// initial parameters, zero gradients and the cached prefixes of B random
// images.
func smallLearner(t *testing.T, n, B int) (*Learner, tensor.Named, tensor.Named, []float32) {
	t.Helper()
	m, tokens := methodtest.PromptModel(2)
	cfg := Config{Domains: n, NCtx: 2, InitStd: 0.3, VisualStd: 0.3, Tau: 0.1, Lambda: 1, Seed: 3}
	l, err := NewLearner(m, tokens, cfg)
	if err != nil {
		t.Fatal(err)
	}
	P := InitParams(cfg, l.Dt, l.Dv, l.E)
	rng := rand.New(rand.NewPCG(3, 4))
	x0 := clip.ImagePrefix(m, 1, gradcheck.Rand(rng, B*3*8*8, 1), B, nil)
	return l, P, zerosLike(P), x0
}

// TestStepChecks: the own domain must be in 0..n−1 and every label in
// 0..C−1 (the errors name the range); one domain trains (no other
// prompts); the step counts as correct exactly the examples whose logits'
// argmax is their label.
func TestStepChecks(t *testing.T) {
	l, P, G, x0 := smallLearner(t, 3, 4)
	labels := []int{0, 2, 1, 2}
	for _, own := range []int{-1, 3} {
		if _, _, _, err := l.Step(P, G, x0, labels, own); err == nil || !strings.Contains(err.Error(), "outside 0..2") {
			t.Errorf("own domain %d: error %v, want one naming 0..2", own, err)
		}
	}
	for _, bad := range [][]int{{0, 3, 1, 2}, {-1, 0, 1, 2}} {
		if _, _, _, err := l.Step(P, G, x0, bad, 0); err == nil || !strings.Contains(err.Error(), "outside 0..2") {
			t.Errorf("labels %v: error %v, want one naming 0..2", bad, err)
		}
	}
	if _, _, _, err := l.Step(P, G, x0, nil, 0); err == nil || !strings.Contains(err.Error(), "empty batch") {
		t.Errorf("no labels: %v", err)
	}
	for trial := range 4 {
		labels := []int{trial % 3, (trial + 1) % 3, 2, 0}
		_, _, correct, err := l.Step(P, G, x0, labels, 2)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.TextFeatures(P); err != nil {
			t.Fatal(err)
		}
		lg, _, err := l.Logits(P, x0, 4)
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		for b, y := range labels {
			if eval.Argmax(lg[b*3:(b+1)*3]) == y {
				want++
			}
		}
		if correct != want {
			t.Errorf("labels %v: %d correct, want %d", labels, correct, want)
		}
	}
	one, P1, G1, x1 := smallLearner(t, 1, 2)
	loss, _, _, err := one.Step(P1, G1, x1, []int{0, 1}, 0)
	if err != nil || !(loss > 0) {
		t.Errorf("one domain: loss %v, %v", loss, err)
	}
}

// TestBuildRefuses: ADAPT needs the prefixes before block 1 and initial
// parameters of its shapes.
func TestBuildRefuses(t *testing.T) {
	m, tokens := methodtest.PromptModel(2)
	clients := methodtest.TensorClients(rand.New(rand.NewPCG(8, 1)), 2, 4, 8, methodtest.PromptClasses)
	for _, start := range []int{0, 2} {
		env, err := parity.TensorEnv(m, start, tokens, methodtest.PromptClasses, clients, train.Options{Epochs: 1, Batch: 4}, 5)
		if err != nil {
			t.Fatal(err)
		}
		s := DefaultSettings()
		s.NCtx = 2
		if _, err := (Method{}).Build(env, s); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("depth %d", start)) {
			t.Errorf("prefixes of depth %d: %v", start, err)
		}
		env.TrainStore.Close()
	}
	env, err := parity.TensorEnv(m, 1, tokens, methodtest.PromptClasses, clients, train.Options{Epochs: 1, Batch: 4}, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer env.TrainStore.Close()
	s := DefaultSettings()
	s.NCtx = 2
	env.Init = tensor.Named{TextName(0): tensor.New(3, 8)}
	if _, err := (Method{}).Build(env, s); err == nil || !strings.Contains(err.Error(), "initial parameters") {
		t.Errorf("initial parameters of the wrong shape: %v", err)
	}
}

// TestSettingsCheckOptimizer: optimizer run takes the run's lr (the
// section's may be 0); adamw and sgd need a positive lr.
func TestSettingsCheckOptimizer(t *testing.T) {
	methodtest.RejectsSettings(t, "adapt", [][2]string{{"adapt.lr=0", "lr"}})
	e := config.Default()
	e.Methods = []string{"adapt"}
	for k, v := range map[string]string{"adapt.optimizer": "run", "adapt.lr": "0"} {
		if err := e.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Validate(); err != nil {
		t.Errorf("optimizer run with lr 0: %v", err)
	}
}

// TestLoadStateRefusesReceived: a saved received copy must be the EMA
// target of a text prompt the client holds, of its shape; anything else is
// refused naming the entry.
func TestLoadStateRefusesReceived(t *testing.T) {
	s := DefaultSettings()
	s.NCtx, s.LR = 2, 0.01
	_, plan := tensorPlan(t, []int{0, 1}, s)
	round(t, plan, 0)
	round(t, plan, 1)
	st, err := plan.Clients[0].State()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st["recv/"+TextName(1)]; !ok {
		t.Fatalf("client 0 saved no received copy of domain 1: %v", st)
	}
	for _, bad := range []struct {
		key string
		t   *tensor.Tensor
	}{
		{"recv/" + TextName(5), st["recv/"+TextName(1)]},
		{"recv/" + ParamVisual, st["param/"+ParamVisual]},
		{"recv/" + TextName(1), tensor.New(3, 3)},
	} {
		b := tensor.Named{}
		for k, v := range st {
			b[k] = v
		}
		b[bad.key] = bad.t
		_, fresh := tensorPlan(t, []int{0, 1}, s)
		if err := fresh.Clients[0].LoadState(b); err == nil || !strings.Contains(err.Error(), bad.key) {
			t.Errorf("%s %v: error %v, want one naming it", bad.key, bad.t.Shape, err)
		}
	}
}

// TestLogitsNeedTextFeatures: scoring before the text features exist is
// refused.
func TestLogitsNeedTextFeatures(t *testing.T) {
	l, P, _, x0 := smallLearner(t, 2, 2)
	if _, _, err := l.Logits(P, x0, 2); err == nil || !strings.Contains(err.Error(), "before TextFeatures") {
		t.Errorf("Logits first: %v", err)
	}
	if _, err := l.TextFeatures(P); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Logits(P, x0, 2); err != nil {
		t.Errorf("Logits after TextFeatures: %v", err)
	}
}

// TestSoftmaxLargeScores: the domain weights of scores far beyond
// float32's exp range (a small τ_d makes ⟨q̂, k̂⟩/τ_d reach ±100) are a
// float64 softmax's: the forward subtracts the row's maximum first.
func TestSoftmaxLargeScores(t *testing.T) {
	a := []float32{100, 95, -100, 60, 61, 62}
	w := make([]float32, len(a))
	softmaxForward(w, a, 2, 3)
	for b := 0; b < 2; b++ {
		var z float64
		for _, v := range a[b*3 : (b+1)*3] {
			z += math.Exp(float64(v) - float64(a[b*3]))
		}
		for i := 0; i < 3; i++ {
			want := math.Exp(float64(a[b*3+i])-float64(a[b*3])) / z
			if got := float64(w[b*3+i]); math.IsNaN(got) || math.Abs(got-want) > 1e-6 {
				t.Errorf("w[%d, %d] = %v, want %v", b, i, got, want)
			}
		}
	}
}

// TestStepZeroesOtherPrompts: a step writes the own domain's text-prompt
// gradient and zeroes the other domains' (whatever G held), as Step's
// contract says.
func TestStepZeroesOtherPrompts(t *testing.T) {
	l, P, G, x0 := smallLearner(t, 3, 4)
	for i := range 3 {
		for k := range G[TextName(i)].Data {
			G[TextName(i)].Data[k] = 7
		}
	}
	if _, _, _, err := l.Step(P, G, x0, []int{0, 1, 0, 1}, 1); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		var nonzero int
		for _, v := range G[TextName(i)].Data {
			if v != 0 {
				nonzero++
			}
		}
		if (i == 1) != (nonzero > 0) {
			t.Errorf("domain %d's text-prompt gradient has %d non-zero values after a step of domain 1", i, nonzero)
		}
	}
}

// TestClientStepLogits: the client's learner returns the batch's logits
// [B, C], the rows the client counts its correct examples on.
func TestClientStepLogits(t *testing.T) {
	l, P, G, x0 := smallLearner(t, 2, 4)
	s := &clientLearner{l: l, p: P, g: G, own: 1}
	_, _, logits, err := s.Step(x0, []int{0, 1, 1, 0})
	if err != nil {
		t.Fatal(err)
	}
	if len(logits) != 4*l.C {
		t.Errorf("%d logits for 4 examples of %d classes", len(logits), l.C)
	}
}

// TestScorer: the global model's scorer gives the learner's logits of the
// parameters after their text features (computed once per label space);
// a label space without a learner is an error.
func TestScorer(t *testing.T) {
	l, P, _, x0 := smallLearner(t, 2, 3)
	sc := &Scorer{Learner: func(space int) (*Learner, error) {
		if space != 0 {
			return nil, fmt.Errorf("no label space %d", space)
		}
		return l, nil
	}, P: P}
	got, err := sc.Logits(0, x0, 3)
	if err != nil {
		t.Fatal(err)
	}
	got = append([]float32(nil), got...)
	if _, err := l.TextFeatures(P); err != nil {
		t.Fatal(err)
	}
	want, _, err := l.Logits(P, x0, 3)
	if err != nil || len(got) != 3*l.C || len(want) != len(got) {
		t.Fatalf("scorer %d logits, learner %d (%v); want %d", len(got), len(want), err, 3*l.C)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("scorer logits %v, want the learner's %v", got, want)
		}
	}
	if _, err := sc.Logits(1, x0, 3); err == nil || !strings.Contains(err.Error(), "no label space 1") {
		t.Errorf("space 1: %v", err)
	}
}
