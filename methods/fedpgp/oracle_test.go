package fedpgp

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestSmallestSettings: n_ctx 1, bottleneck 1, mu 0 and init_std 0 are
// valid; one below each is refused naming it.
func TestSmallestSettings(t *testing.T) {
	c := Config{NCtx: 1, Bottleneck: 1, NumPrompt: 1, Mu: 0, Temp: 0.5, InitStd: 0}
	if err := c.Validate(); err != nil {
		t.Fatalf("%+v: %v", c, err)
	}
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.NCtx = 0 }, "n_ctx"},
		{func(c *Config) { c.Bottleneck = 0 }, "bottleneck"},
		{func(c *Config) { c.Mu = -1e-9 }, "mu"},
		{func(c *Config) { c.InitStd = -1e-9 }, "init_std"},
	} {
		bad := c
		tc.mod(&bad)
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %s", bad, err, tc.want)
		}
	}
}

// TestInitDraws: U, V and sigma are N(0, init_std²) in that order: σ·z for
// the generator's successive normals z, replayed from the seed.
func TestInitDraws(t *testing.T) {
	m, tokens := randomModel(4, 3)
	l, err := New(m, tokens, Config{NCtx: 3, Bottleneck: 2, NumPrompt: 2, Mu: 1, Temp: 0.5, InitStd: 0.3, Seed: 6})
	if err != nil {
		t.Fatal(err)
	}
	ref := rand.New(rand.NewPCG(6, 0x5eed))
	for _, p := range []*tensor.Tensor{l.U, l.V, l.Sigma} {
		for i, v := range p.Data {
			if want := float32(ref.NormFloat64() * 0.3); v != want {
				t.Fatalf("%v[%d] = %v, want %v", p.Shape, i, v, want)
			}
		}
	}
}

// TestLabelRange: a label equal to the class count is refused by the
// learner, naming the sample and the range 0..C−1 — with two prompts, so
// that the label is still below the N·C rows the loss scores.
func TestLabelRange(t *testing.T) {
	m, tokens := randomModel(4, 3)
	l, err := New(m, tokens, Config{NCtx: 3, Bottleneck: 2, NumPrompt: 2, Mu: 1, Temp: 0.5, InitStd: 0.3, Seed: 6})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := l.Step(make([]float32, 2*6), []int{0, 4}); err == nil || !strings.Contains(err.Error(), "label 4 of sample 1 outside 0..3") {
		t.Errorf("label 4 of 4 classes: error %v, want fedpgp's naming sample 1 and 0..3", err)
	}
	if _, _, _, err := l.Step(make([]float32, 2*6), []int{0, 3}); err != nil {
		t.Errorf("labels 0, 3 of 4 classes: %v", err)
	}
}

// TestPositionCheck: the section's class_token_position takes "" (unset)
// and the three positions, and refuses others naming the key.
func TestPositionCheck(t *testing.T) {
	for _, tc := range []struct {
		pos string
		ok  bool
	}{{"", true}, {"end", true}, {"middle", true}, {"front", true}, {"side", false}} {
		s := Method{}.DefaultConfig().(*Settings)
		s.ClassTokenPosition = tc.pos
		err := config.CheckSection("fedpgp", s)
		if tc.ok != (err == nil) || (!tc.ok && !strings.Contains(err.Error(), "fedpgp.class_token_position")) {
			t.Errorf("position %q: error %v", tc.pos, err)
		}
	}
}

// TestCosineMeans: the terms cos_pos and cos_neg are the means over the
// N·C rows of cos(f_0, f_G) and cos(f_G, f_P), computed in float64 from the
// step's features.
func TestCosineMeans(t *testing.T) {
	m, tokens := randomModel(4, 3)
	l, err := New(m, tokens, Config{NCtx: 3, Bottleneck: 2, NumPrompt: 2, Mu: 1, Temp: 0.5, InitStd: 0.7, Seed: 6})
	if err != nil {
		t.Fatal(err)
	}
	img := gradcheck.Rand(rand.New(rand.NewPCG(1, 2)), 3*6, 1)
	_, terms, _, err := l.Step(img, []int{0, 3, 1})
	if err != nil {
		t.Fatal(err)
	}
	cos := func(a, b []float32) float64 {
		var ab, aa, bb float64
		for k := range a {
			ab += float64(a[k]) * float64(b[k])
			aa += float64(a[k]) * float64(a[k])
			bb += float64(b[k]) * float64(b[k])
		}
		return ab / math.Sqrt(aa*bb)
	}
	R, E := l.R, l.E
	if R != 8 {
		t.Fatalf("%d rows, want N·C = 8", R)
	}
	var pos, neg float64
	for r := 0; r < R; r++ {
		pos += cos(l.f0[r*E:(r+1)*E], l.fG[r*E:(r+1)*E]) / float64(R)
		neg += cos(l.fG[r*E:(r+1)*E], l.fP[r*E:(r+1)*E]) / float64(R)
	}
	for name, want := range map[string]float64{"cos_pos": pos, "cos_neg": neg} {
		if got := terms[name]; math.Abs(got-want) > 1e-5 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

// TestTwoPromptFixture: the step fixture replayed with num_prompt 2 and
// U, V, sigma tiled twice gives each prompt the one-prompt replay's
// features, f_UV included (the two prompts are the same).
func TestTwoPromptFixture(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, "../../testdata/fedpgp/init.safetensors")
	ref, meta := paritytest.Read(t, "../../testdata/fedpgp/step.safetensors")
	one, err := StepFromFile(m, init, stepInputs(ref), meta)
	if err != nil {
		t.Fatal(err)
	}
	if meta["num_prompt"] != "1" {
		t.Fatalf("fixture num_prompt %q, want 1", meta["num_prompt"])
	}
	meta2 := map[string]string{}
	for k, v := range meta {
		meta2[k] = v
	}
	meta2["num_prompt"] = "2"
	init2 := tensor.Named{}
	for _, p := range params {
		v := init[p]
		shape := append([]int{2}, v.Shape[1:]...)
		init2[p] = &tensor.Tensor{Shape: shape, Data: append(append([]float32(nil), v.Data...), v.Data...)}
	}
	two, err := StepFromFile(m, init2, stepInputs(ref), meta2)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"text_features", "text_features_sigma", "text_features_UV"} {
		a, b := one[name].Data, two[name].Data
		if len(b) != 2*len(a) {
			t.Fatalf("%s: %d values with two prompts, want %d", name, len(b), 2*len(a))
		}
		for i := range b {
			if d := math.Abs(float64(b[i] - a[i%len(a)])); d > 1e-5*(1+math.Abs(float64(a[i%len(a)]))) {
				t.Fatalf("%s[%d] = %v with two prompts, %v with one", name, i, b[i], a[i%len(a)])
			}
		}
	}
}

// TestSpaceLogits: the evaluation scorer gives each class the best of its
// N prompts' logits, exp(logit_scale)·cos(image, f_P row n·C + c), computed
// here in float64 from the learner's text features; with N = 1 the plain
// logits.
func TestSpaceLogits(t *testing.T) {
	for _, N := range []int{1, 2, 3} {
		m, tokens := randomModel(4, 3)
		l, err := New(m, tokens, Config{NCtx: 3, Bottleneck: 2, NumPrompt: N, Mu: 1, Temp: 0.5, InitStd: 0.7, Seed: 6})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Prepare(); err != nil {
			t.Fatal(err)
		}
		const B, C, E = 5, 4, 6
		img := gradcheck.Rand(rand.New(rand.NewPCG(2, uint64(N))), B*E, 1)
		got, err := l.Logits(img, B)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != B*C {
			t.Fatalf("N %d: %d logits, want %d", N, len(got), B*C)
		}
		txt := l.evalTxt
		s := math.Exp(float64(l.LogitScale))
		picks := map[int]bool{}
		for b := 0; b < B; b++ {
			for c := 0; c < C; c++ {
				best, arg := math.Inf(-1), 0
				for n := 0; n < N; n++ {
					r := n*C + c
					var xy, xx, yy float64
					for k := 0; k < E; k++ {
						x, y := float64(img[b*E+k]), float64(txt[r*E+k])
						xy, xx, yy = xy+x*y, xx+x*x, yy+y*y
					}
					if v := s * xy / math.Sqrt(xx*yy); v > best {
						best, arg = v, n
					}
				}
				picks[arg] = true
				if g := float64(got[b*C+c]); math.Abs(g-best) > 1e-4*(1+math.Abs(best)) {
					t.Fatalf("N %d: logit [%d, %d] = %v, want the best prompt's %v", N, b, c, g, best)
				}
			}
		}
		if len(picks) != N {
			t.Errorf("N %d: the best prompt is always among %v: the case does not test the max", N, picks)
		}
	}
}
