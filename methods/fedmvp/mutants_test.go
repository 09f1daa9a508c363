package fedmvp

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
)

// The tests of this file kill mutants `make mutants` found alive in
// methods/fedmvp (issue 35).

// TestInitParams: a new learner's tensors are PyTorch's defaults for the
// authors' modules: nn.Linear U(±1/√in) for weights and biases, LayerNorm
// 1 and 0, MultiheadAttention's in_proj Xavier-uniform U(±√(6/(Dv+3Dv)))
// with a zero bias, out_proj U(±1/√Dv) with a zero bias, the LoRA factors
// N(0, 0.02²); every shape as the reference names say.
func TestInitParams(t *testing.T) {
	m := randomModel()
	rng := rand.New(rand.NewPCG(5, 6))
	rows := []int{0, 1, 2}
	l, err := New(m, gradcheck.Rand(rng, len(rows)*6, 1), rows, 3, Config{Alpha: 1, Heads: 2, Rank: 3, Prompts: 2, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	Dv, E, F, r := 8, 6, 32, 3
	type want struct {
		shape []int
		kind  string  // "uniform", "ones", "zeros", "normal"
		scale float64 // the uniform bound or the normal std
	}
	u := func(bound float64, shape ...int) want { return want{shape, "uniform", bound} }
	for name, w := range map[string]want{
		ParamLinW:   u(1/math.Sqrt(float64(E)), Dv, E),
		ParamLinB:   u(1/math.Sqrt(float64(E)), Dv),
		ParamNormQW: {[]int{Dv}, "ones", 0},
		ParamNormQB: {[]int{Dv}, "zeros", 0},
		ParamNormKW: {[]int{Dv}, "ones", 0},
		ParamNormKB: {[]int{Dv}, "zeros", 0},
		ParamInW:    u(math.Sqrt(6/float64(Dv+3*Dv)), 3*Dv, Dv),
		ParamInB:    {[]int{3 * Dv}, "zeros", 0},
		ParamOutW:   u(1/math.Sqrt(float64(Dv)), Dv, Dv),
		ParamOutB:   {[]int{Dv}, "zeros", 0},
		ParamNormFW: {[]int{Dv}, "ones", 0},
		ParamNormFB: {[]int{Dv}, "zeros", 0},
		ParamFF1W:   u(1/math.Sqrt(float64(Dv)), 2*F, Dv),
		ParamFF1B:   u(1/math.Sqrt(float64(Dv)), 2*F),
		ParamFF2W:   u(1/math.Sqrt(float64(F)), Dv, F),
		ParamFF2B:   u(1/math.Sqrt(float64(F)), Dv),
		ParamQA:     {[]int{Dv, r}, "normal", 0.02},
		ParamQB:     {[]int{r, Dv}, "normal", 0.02},
		ParamKA:     {[]int{Dv, r}, "normal", 0.02},
		ParamKB:     {[]int{r, Dv}, "normal", 0.02},
		ParamVA:     {[]int{Dv, r}, "normal", 0.02},
		ParamVB:     {[]int{r, Dv}, "normal", 0.02},
	} {
		p := l.Params()[name]
		if p == nil {
			t.Fatalf("no %s", name)
		}
		if !slices.Equal(p.Shape, w.shape) {
			t.Errorf("%s: shape %v, want %v", name, p.Shape, w.shape)
			continue
		}
		if g := l.Grads()[name]; g == nil || !slices.Equal(g.Shape, w.shape) {
			t.Errorf("%s: no gradient of its shape", name)
		}
		var mx, ss, sum float64
		for _, v := range p.Data {
			mx = math.Max(mx, math.Abs(float64(v)))
			ss += float64(v) * float64(v)
			sum += float64(v)
		}
		n := float64(len(p.Data))
		switch w.kind {
		case "ones", "zeros":
			c := 0.0
			if w.kind == "ones" {
				c = 1
			}
			for i, v := range p.Data {
				if float64(v) != c {
					t.Errorf("%s[%d] = %v, want %v", name, i, v, c)
					break
				}
			}
		case "uniform":
			// inside the bound, filling it: the largest of n uniform draws
			// falls short of it by more than 6/n only with probability e^-6
			if mx > w.scale || mx < w.scale*(1-6/n) {
				t.Errorf("%s: max|w| %.4g, want just below %.4g", name, mx, w.scale)
			}
			if sd := w.scale / math.Sqrt(3*n); math.Abs(sum/n) > 5*sd {
				t.Errorf("%s: mean %.3g, want 0 ± %.3g", name, sum/n, 5*sd)
			}
		case "normal":
			if got := math.Sqrt(ss / n); math.Abs(got-w.scale) > 5*w.scale/math.Sqrt(2*n) {
				t.Errorf("%s: sample std %.4g over %v values, want %.4g", name, got, n, w.scale)
			}
		}
	}
}

// TestConfigValidateBoundaries: α 0, one head, rank 1 and as many prompts
// as patches are accepted; one prompt more, zero prompts, rank 0, heads 0
// or not dividing the width, and a negative α are refused, naming the
// setting.
func TestConfigValidateBoundaries(t *testing.T) {
	const Dv, P = 8, 4
	ok := Config{Alpha: 0, Heads: 1, Rank: 1, Prompts: P}
	if err := ok.Validate(Dv, P); err != nil {
		t.Errorf("%+v: %v, want accepted", ok, err)
	}
	if err := (Config{Alpha: 1, Heads: 8, Rank: 1, Prompts: 1}).Validate(Dv, P); err != nil {
		t.Errorf("heads = width, one prompt: %v", err)
	}
	if err := (Config{Alpha: 1, Heads: 3, Rank: 1, Prompts: 1}).Validate(0, 0); err != nil {
		t.Errorf("no model yet (width and patches 0): %v", err)
	}
	for _, bad := range []struct {
		want string
		c    Config
	}{
		{"alpha", Config{Alpha: -1e-9, Heads: 1, Rank: 1, Prompts: 1}},
		{"heads", Config{Alpha: 1, Heads: 0, Rank: 1, Prompts: 1}},
		{"heads", Config{Alpha: 1, Heads: 3, Rank: 1, Prompts: 1}},
		{"lora_rank", Config{Alpha: 1, Heads: 1, Rank: 0, Prompts: 1}},
		{"prompts", Config{Alpha: 1, Heads: 1, Rank: 1, Prompts: 0}},
		{"prompts", Config{Alpha: 1, Heads: 1, Rank: 1, Prompts: P + 1}},
	} {
		if err := bad.c.Validate(Dv, P); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: error %v, want one naming %s", bad.c, err, bad.want)
		}
	}
}

// TestNewRefuses: New refuses description rows of a class outside 0..C−1
// (−1 and C), a class without a description, no rows, and features that do
// not fit the rows, naming the problem; a one-block ViT is accepted.
func TestNewRefuses(t *testing.T) {
	m := randomModel()
	rng := rand.New(rand.NewPCG(1, 1))
	cfg := Config{Alpha: 1, Heads: 2, Rank: 2, Prompts: 2}
	text := func(n int) []float32 { return gradcheck.Rand(rng, n*6, 1) }
	for _, bad := range []struct {
		want string
		text []float32
		rows []int
	}{
		{"belongs to class 3, outside 0..2", text(3), []int{0, 1, 3}},
		{"belongs to class -1, outside 0..2", text(3), []int{0, -1, 2}},
		{"class 1 has no description", text(3), []int{0, 2, 2}},
		{"description features", nil, nil},
		{"description features", text(2), []int{0, 1, 2}},
	} {
		if _, err := New(m, bad.text, bad.rows, 3, cfg); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("rows %v: error %v, want one naming %q", bad.rows, err, bad.want)
		}
	}
	// randomModel has 4 patches: 4 prompts fit, 5 do not
	four := cfg
	four.Prompts = 4
	if _, err := New(m, text(3), []int{0, 1, 2}, 3, four); err != nil {
		t.Errorf("as many prompts as patches: %v", err)
	}
	four.Prompts = 5
	if _, err := New(m, text(3), []int{0, 1, 2}, 3, four); err == nil || !strings.Contains(err.Error(), "prompts 5") {
		t.Errorf("a prompt more than the patches: %v", err)
	}
	c := m.W.Config
	c.Vision.Layers = 1
	one := clip.New(clip.Random(c, 3))
	if _, err := New(one, text(3), []int{0, 1, 2}, 3, cfg); err != nil {
		t.Errorf("a one-block ViT: %v", err)
	}
}
