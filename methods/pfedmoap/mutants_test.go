package pfedmoap

import (
	"fmt"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/prompt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestConfigValidateBoundaries: every setting's smallest legal value is
// accepted and the value just past it refused, naming the setting.
func TestConfigValidateBoundaries(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"n_ctx 1":              func(c *Config) { c.NCtx = 1 },
		"gate width 1, 1 head": func(c *Config) { c.GateWidth, c.GateHeads = 1, 1 },
		"lambda 0":             func(c *Config) { c.Lambda = 0 },
		"num_experts 1":        func(c *Config) { c.NumExperts = 1 },
		"init_std 0":           func(c *Config) { c.InitStd = 0 },
		"momenta 0":            func(c *Config) { c.Momentum, c.GateMomentum = 0, 0 },
		"weight decays 0":      func(c *Config) { c.WeightDecay, c.GateWeightDecay = 0, 0 },
		"position unset":       func(c *Config) { c.Position = "" },
	} {
		c := DefaultConfig()
		mod(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v, want accepted", name, err)
		}
	}
	for _, bad := range []struct {
		want string // what the error names
		mod  func(*Config)
	}{
		{"gate width", func(c *Config) { c.GateWidth, c.GateHeads = 0, 1 }},
		{"gate heads", func(c *Config) { c.GateHeads = 0 }},
		{"lambda", func(c *Config) { c.Lambda = -1e-9 }},
		{"init_std", func(c *Config) { c.InitStd = -1e-9 }},
		{"lr", func(c *Config) { c.LR = 0 }},
		{"momentum", func(c *Config) { c.Momentum = -1e-9 }},
		{"gating_momentum", func(c *Config) { c.GateMomentum = -1e-9 }},
		{"weight_decay", func(c *Config) { c.WeightDecay = -1e-9 }},
		{"gating_weight_decay", func(c *Config) { c.GateWeightDecay = -1e-9 }},
		{"class_token_position", func(c *Config) { c.Position = "diagonal" }},
	} {
		c := DefaultConfig()
		bad.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want one naming it", bad.want, err)
		}
	}
	c := DefaultConfig()
	if err := c.ValidateClients(c.NumExperts); err != nil {
		t.Errorf("num_experts = clients: %v, want accepted", err)
	}
	if err := c.ValidateClients(c.NumExperts - 1); err == nil {
		t.Error("num_experts = clients + 1 accepted")
	}
	if got := c.Experts(1); got != 0 {
		t.Errorf("Experts(1) = %d, want 0 (the local prompt alone)", got)
	}
	c.NumExperts = 1
	if got := c.Experts(5); got != 0 {
		t.Errorf("num_experts 1: Experts(5) = %d, want 0", got)
	}
}

// TestNewGateInit: NewGate refuses a width that is not a positive multiple
// of the heads, accepts width 1 with one head, and draws every tensor as
// PyTorch's Linear default, U(−1/√d, 1/√d): inside the bound, filling it,
// centred on 0.
func TestNewGateInit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dh := range [][2]int{{0, 1}, {4, 0}, {6, 4}} {
		if _, err := NewGate(dh[0], dh[1], 10, rng); err == nil || !strings.Contains(err.Error(), "gating_embed_dim") {
			t.Errorf("NewGate(%d, %d): error %v, want one naming gating_embed_dim", dh[0], dh[1], err)
		}
	}
	if _, err := NewGate(1, 1, 10, rng); err != nil {
		t.Errorf("NewGate(1, 1): %v", err)
	}
	const d = 64
	g, err := NewGate(d, 4, 10, rng)
	if err != nil {
		t.Fatal(err)
	}
	bound := 1 / math.Sqrt(d)
	for _, name := range gateNames {
		p := g.P[name]
		want := d * d
		if strings.HasSuffix(name, "bias") {
			want = d
		}
		if len(p.Data) != want {
			t.Fatalf("%s: %d values, want %d", name, len(p.Data), want)
		}
		var mx, sum float64
		for _, v := range p.Data {
			mx = math.Max(mx, math.Abs(float64(v)))
			sum += float64(v)
		}
		mean := sum / float64(len(p.Data))
		// the largest of n uniform draws is within bound·(1 − 5/n) but for e^-5
		if mx > bound || mx < bound*(1-5/float64(len(p.Data))) {
			t.Errorf("%s: max|w| %.4g, want just below 1/√%d = %.4g", name, mx, d, bound)
		}
		if sd := bound / math.Sqrt(3*float64(len(p.Data))); math.Abs(mean) > 5*sd {
			t.Errorf("%s: mean %.3g, want 0 ± %.3g", name, mean, 5*sd)
		}
	}
}

// TestGateLargeScores: scores far beyond float32's exp range (⟨q, k⟩·10 in
// the hundreds) still give the attention and output of a float64 softmax:
// the forward subtracts the row's maximum before exponentiating.
func TestGateLargeScores(t *testing.T) {
	const D, H, B, C, Ex = 4, 1, 1, 1, 3
	g, err := NewGate(D, H, 10, rand.New(rand.NewPCG(3, 4)))
	if err != nil {
		t.Fatal(err)
	}
	// identity projections with zero biases: q = query, k = v = kv
	for _, p := range []string{"W_q", "W_k", "W_v", "W_o"} {
		w, b := g.w(p+".weight"), g.w(p+".bias")
		clear(w)
		clear(b)
		for i := 0; i < D; i++ {
			w[i*D+i] = 1
		}
	}
	query := []float32{3, 0, 0, 0}
	kv := []float32{3, 0, 0, 0, 2.9, 1, 0, 0, 0, 0, 0, 2}
	out := g.Forward(query, B, kv, C, Ex)
	// scores 10·⟨q, k_e⟩ = 90, 87, 0
	s := []float64{90, 87, 0}
	var z float64
	for _, v := range s {
		z += math.Exp(v - 90)
	}
	want := make([]float64, D)
	for e, v := range s {
		a := math.Exp(v-90) / z
		if got := float64(g.Attention()[e]); math.Abs(got-a) > 1e-6 {
			t.Errorf("attention[%d] = %v, want %v", e, got, a)
		}
		for j := 0; j < D; j++ {
			want[j] += a * float64(kv[e*D+j])
		}
	}
	for j := range want {
		if got := float64(out[j]); math.IsNaN(got) || math.Abs(got-want[j]) > 1e-5 {
			t.Errorf("out[%d] = %v, want %v", j, got, want[j])
		}
	}
}

// TestStepLabelRange: labels 0 and C−1 train, −1 and C are refused naming
// the sample; an image batch of the wrong size is refused.
func TestStepLabelRange(t *testing.T) {
	m := paritytest.Model(t)
	ref, meta := paritytest.Read(t, "../../testdata/pfedmoap/step.safetensors")
	cfg, err := ConfigFromMeta(meta)
	if err != nil {
		t.Fatal(err)
	}
	tokens, _ := prompt.Ints(ref, "tokens")
	l, err := New(m, tokens, cfg)
	if err != nil {
		t.Fatal(err)
	}
	img := ref["image_features"].Data[:2*l.E]
	if _, _, err := l.Step(img, []int{0, l.C - 1}); err != nil {
		t.Errorf("labels 0 and C−1: %v", err)
	}
	for _, bad := range [][]int{{0, l.C}, {-1, 0}} {
		if _, _, err := l.Step(img, bad); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("outside 0..%d", l.C-1)) {
			t.Errorf("labels %v: error %v, want one naming the range", bad, err)
		}
	}
	if _, _, err := l.Step(img[:l.E], []int{0, 1}); err == nil || !strings.Contains(err.Error(), "image features") {
		t.Errorf("one image for two labels: %v", err)
	}
}

// TestNearestBounds: zero experts is a valid request (none come back, the
// distances still do), a negative count and a client outside the pool are
// refused, and the last client of the pool is a valid self.
func TestNearestBounds(t *testing.T) {
	pool := [][]float32{{0, 0}, {3, 4}, {1, 0}}
	ids, dist, err := Nearest(pool, 0, 0)
	if err != nil || len(ids) != 0 || len(dist) != 3 || dist[1] != 5 {
		t.Errorf("k = 0: ids %v, dist %v, err %v; want none, [0 5 1]", ids, dist, err)
	}
	if _, _, err := Nearest(pool, 0, -1); err == nil || !strings.Contains(err.Error(), "-1 experts") {
		t.Errorf("k = −1: error %v", err)
	}
	for _, self := range []int{-1, 3} {
		if _, _, err := Nearest(pool, self, 1); err == nil || !strings.Contains(err.Error(), "no pool entry") {
			t.Errorf("self %d: error %v, want one naming the missing entry", self, err)
		}
	}
	if ids, _, err := Nearest(pool, 2, 1); err != nil || !slices.Equal(ids, []int{0}) {
		t.Errorf("self 2: %v, %v; want [0]", ids, err)
	}
	if _, _, err := Nearest([][]float32{{0, 0}, {1}}, 0, 1); err == nil || !strings.Contains(err.Error(), "pool entry 1") {
		t.Errorf("entries of different lengths: %v", err)
	}
}

// TestRandomSkipsOutOfPool: the random rule skips ids outside the pool
// (negative or past its end) and self, and takes id 0.
func TestRandomSkipsOutOfPool(t *testing.T) {
	pool := [][]float32{{0}, {1}, {2}}
	got := Random(pool, 1, 5, []int{-1, 3, 1, 0, 2})
	if !slices.Equal(got, []int{0, 2}) {
		t.Errorf("Random = %v, want [0 2]", got)
	}
}

// TestShared: only the prompt is uploaded; the gate stays.
func TestShared(t *testing.T) {
	if !Shared(ParamCtx) || Shared("gating.W_q.weight") || !IsGate("gating.W_q.weight") || IsGate(ParamCtx) {
		t.Error("the prompt must be shared and the gate kept")
	}
	l := &Learner{}
	if !l.Shared(ParamCtx) || l.Shared("gating.W_o.bias") {
		t.Error("Learner.Shared differs from Shared")
	}
}

// TestPromptInit: the prompt starts N(0, init_std²): its sample standard
// deviation is init_std's within sampling error, for two init_std, and 0
// gives a zero prompt.
func TestPromptInit(t *testing.T) {
	m := paritytest.Model(t)
	ref, meta := paritytest.Read(t, "../../testdata/pfedmoap/step.safetensors")
	cfg, err := ConfigFromMeta(meta)
	if err != nil {
		t.Fatal(err)
	}
	tokens, _ := prompt.Ints(ref, "tokens")
	for _, std := range []float64{0.02, 0.5, 0} {
		cfg.InitStd = std
		l, err := New(m, tokens, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var ss float64
		for _, v := range l.ctx.Data {
			ss += float64(v) * float64(v)
		}
		n := float64(len(l.ctx.Data))
		got := math.Sqrt(ss / n)
		if math.Abs(got-std) > 5*std/math.Sqrt(2*n) {
			t.Errorf("init_std %g: sample std %.4g over %v values", std, got, n)
		}
	}
}
