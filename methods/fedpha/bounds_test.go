package fedpha

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
)

// TestConfigBoundaries: the edges Validate allows are allowed (n_ctx 1,
// ratio 0 and 1, α and both λ 0, the smallest positive init_std) and the
// values just outside are refused, naming the key.
func TestConfigBoundaries(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"n_ctx 1":       func(c *Config) { c.NCtx = 1 },
		"ratio 0":       func(c *Config) { c.Ratio = 0 },
		"ratio 1":       func(c *Config) { c.Ratio = 1 },
		"alpha 0":       func(c *Config) { c.Alpha = 0 },
		"lambda_pull 0": func(c *Config) { c.LambdaPull = 0 },
		"lambda_push 0": func(c *Config) { c.LambdaPush = 0 },
		"init_std tiny": func(c *Config) { c.InitStd = 1e-300 },
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
		{"ratio", func(c *Config) { c.Ratio = -1e-9 }},
		{"ratio", func(c *Config) { c.Ratio = 1 + 1e-9 }},
		{"alpha", func(c *Config) { c.Alpha = -1e-9 }},
		{"alpha", func(c *Config) { c.Alpha = math.Inf(1) }},
		{"lambda_pull", func(c *Config) { c.LambdaPull = -1e-9 }},
		{"lambda_pull", func(c *Config) { c.LambdaPull = math.Inf(1) }},
		{"lambda_push", func(c *Config) { c.LambdaPush = -1e-9 }},
		{"lambda_push", func(c *Config) { c.LambdaPush = math.Inf(1) }},
		{"init_std", func(c *Config) { c.InitStd = 0 }},
		{"init_std", func(c *Config) { c.InitStd = math.Inf(1) }},
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
		if err := config.CheckSection("fedpha", s); err != nil {
			t.Errorf("position %q: %v", pos, err)
		}
	}
	for _, pos := range []string{"middle", "front"} {
		s := Method{}.DefaultConfig().(*Settings)
		s.ClassTokenPosition = pos
		if err := config.CheckSection("fedpha", s); err == nil || !strings.Contains(err.Error(), "fedpha.class_token_position") {
			t.Errorf("position %q: error %v, want one naming fedpha.class_token_position", pos, err)
		}
	}
}

// TestInitDraw: both contexts start as independent draws of
// N(0, init_std²) (sample standard deviation within 30%; a wrong scale is
// off by orders of magnitude).
func TestInitDraw(t *testing.T) {
	m, tokens := randomModel(3, 3)
	cfg := DefaultConfig()
	cfg.NCtx, cfg.Seed = 3, 9
	l, err := New(m, tokens, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range l.Params() {
		var ss float64
		for _, v := range p.Data {
			ss += float64(v) * float64(v)
		}
		if sd := math.Sqrt(ss / float64(len(p.Data))); math.Abs(sd-cfg.InitStd) > 0.3*cfg.InitStd {
			t.Errorf("%s: standard deviation %g, want init_std %g", name, sd, cfg.InitStd)
		}
	}
	if l.global.Data[0] == l.local.Data[0] {
		t.Error("the two contexts start equal")
	}
}

// TestNewRefusesNoClasses: no class prompt rows is an error, not a panic.
func TestNewRefusesNoClasses(t *testing.T) {
	m, _ := randomModel(3, 3)
	cfg := DefaultConfig()
	cfg.NCtx = 3
	if _, err := New(m, []int{}, cfg); err == nil {
		t.Error("no class prompts accepted")
	}
}

// TestLogitsInput: one image scores after Prepare; no image, features of
// the wrong size, or scoring before Prepare are errors.
func TestLogitsInput(t *testing.T) {
	m, tokens := randomModel(3, 3)
	cfg := DefaultConfig()
	cfg.NCtx = 3
	l, err := New(m, tokens, cfg)
	if err != nil {
		t.Fatal(err)
	}
	img := []float32{1, -1, 0.5, 2, -0.25, 1}
	if _, err := l.Logits(img, 1); err == nil || !strings.Contains(err.Error(), "Prepare") {
		t.Errorf("Logits before Prepare: %v", err)
	}
	if err := l.Prepare(); err != nil {
		t.Fatal(err)
	}
	if got, err := l.Logits(img, 1); err != nil || len(got) != 3 {
		t.Fatalf("one image: %v, %v", got, err)
	}
	if _, err := l.Logits(nil, 0); err == nil {
		t.Error("no image accepted")
	}
	if _, err := l.Logits(img[:5], 1); err == nil {
		t.Error("5 values for one image of width 6 accepted")
	}
}

// TestProjectionEdges: ratio 0 keeps no direction (cutoff = k: P = 0,
// and a zero gradient), ratio 1 keeps the whole row space; a 1 × 1 prompt
// projects onto itself; a size that does not match [n, D] is refused.
func TestProjectionEdges(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	const n, D = 2, 3
	a := gradcheck.Rand(rng, n*D, 1)
	p := Projection{Ratio: 0}
	P, err := p.Forward(a, n, D)
	if err != nil {
		t.Fatalf("ratio 0: %v", err)
	}
	for i, v := range P {
		if v != 0 {
			t.Fatalf("ratio 0: P[%d] = %g, want 0", i, v)
		}
	}
	da := make([]float32, n*D)
	if err := p.Backward(da, gradcheck.Rand(rng, D*D, 1)); err != nil {
		t.Fatalf("ratio 0 backward: %v", err)
	}
	for i, v := range da {
		if v != 0 {
			t.Fatalf("ratio 0: dA[%d] = %g, want 0", i, v)
		}
	}
	p = Projection{Ratio: 1}
	if P, err = p.Forward([]float32{-3}, 1, 1); err != nil || len(P) != 1 || math.Abs(float64(P[0])-1) > 1e-6 {
		t.Errorf("1 × 1 prompt: P %v, %v; want [1]", P, err)
	}
	for _, c := range []struct{ len, n, D int }{{5, 2, 3}, {0, 0, 3}, {0, 2, 0}} {
		if _, err := p.Forward(make([]float32, c.len), c.n, c.D); err == nil {
			t.Errorf("%d values as [%d, %d] accepted", c.len, c.n, c.D)
		}
	}
}

// TestPushAtZeroDistance: equal local and global text features (distance
// 0) make the push term λ_push·α with the hinge's gradient 0, not a
// division by the zero distance.
func TestPushAtZeroDistance(t *testing.T) {
	m, tokens := randomModel(3, 3)
	cfg := Config{NCtx: 3, Ratio: 0.5, Alpha: 1.5, LambdaPull: 1, LambdaPush: 2, InitStd: 2, Seed: 4}
	l, err := New(m, tokens, cfg)
	if err != nil {
		t.Fatal(err)
	}
	C, E := l.C, l.E
	rng := rand.New(rand.NewPCG(1, 2))
	l.txt = gradcheck.Rand(rng, 3*C*E, 1)
	copy(l.txt[C*E:2*C*E], l.txt[:C*E]) // f_G = f_L
	_, push := l.regularisers()
	for c, d := range l.dist {
		if d != 0 {
			t.Fatalf("class %d: distance %g between equal features", c, d)
		}
	}
	if want := cfg.LambdaPush * cfg.Alpha; math.Abs(push-want) > 1e-12 {
		t.Errorf("push %v, want λ_push·α = %v", push, want)
	}
	for i, v := range l.dn[C*E : 2*C*E] {
		if v != 0 {
			t.Fatalf("∂push/∂f̂_G[%d] = %v, want 0 (pull does not reach f_G)", i, v)
		}
	}
}

// TestPushHinge: at distance exactly α the hinge ReLU(α − d) is at its
// kink, where its gradient is 0 (as torch's relu): the class adds nothing
// to the push term and no gradient to f_G.
func TestPushHinge(t *testing.T) {
	m, tokens := randomModel(3, 3)
	l, err := New(m, tokens, Config{NCtx: 3, Ratio: 0.5, Alpha: 1, LambdaPull: 1, LambdaPush: 2, InitStd: 2, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	C, E := l.C, l.E
	l.txt = gradcheck.Rand(rand.New(rand.NewPCG(5, 2)), 3*C*E, 1)
	l.regularisers()
	// the distance of class 0 as regularisers computes it, in float64
	var ss float64
	for k := 0; k < E; k++ {
		d := float64(l.nhat[k]) - float64(l.nhat[C*E+k])
		ss += d * d
	}
	l.Cfg.Alpha = math.Sqrt(ss)
	_, push := l.regularisers()
	var want float64
	for c := 1; c < C; c++ {
		want += l.Cfg.LambdaPush / float64(C) * math.Max(0, l.Cfg.Alpha-float64(l.dist[c]))
	}
	if math.Abs(push-want) > 1e-6*math.Max(want, 1e-3) {
		t.Errorf("push %v, want %v (class 0 at the hinge adds 0)", push, want)
	}
	for k, v := range l.dn[C*E : C*E+E] {
		if v != 0 {
			t.Fatalf("class 0 at the hinge: ∂push/∂f̂_G[%d] = %v, want 0", k, v)
		}
	}
}

// TestProjectionNoDerivative: Backward refuses a rank-deficient global
// prompt (a kept singular value 0) and equal kept and dropped singular
// values, naming why, rather than returning a gradient.
func TestProjectionNoDerivative(t *testing.T) {
	for _, c := range []struct {
		name  string
		ratio float64
		a     []float32
		want  string
	}{
		{"rank 1 of 2", 1, []float32{1, 0, 0, 2, 0, 0}, "rank-deficient"},
		{"singular values 1 and 1", 0.5, []float32{1, 0, 0, 0, 1, 0}, "are equal"},
	} {
		p := Projection{Ratio: c.ratio}
		if _, err := p.Forward(c.a, 2, 3); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		r := make([]float32, 9)
		for i := range r {
			r[i] = float32(i%4) - 1.5
		}
		if err := p.Backward(make([]float32, 6), r); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
}
