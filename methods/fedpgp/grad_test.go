package fedpgp

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/methodtest"
)

// randomModel is a 2-block text tower (context 12) with embeddings scaled up
// so the blocks work away from their linear regime; tokens are C rows
// "SOT X… c… . EOT" with 1..3 class tokens.
func randomModel(C, nCtx int) (*clip.Model, []int) {
	return methodtest.TinyCLIP{EmbedDim: 6, VisionLayers: 1, TextLayers: 2, EmbScale: 50}.Prompts(C, nCtx)
}

// TestGradCheck checks every parameter's gradient of the whole loss (CE and
// the contrastive term through both arguments of both cosines), for one and
// for two prompts, with the class token at the end, in the middle and in
// front.
func TestGradCheck(t *testing.T) {
	for _, tc := range []struct {
		N   int
		pos string
	}{{1, "end"}, {2, "end"}, {1, "middle"}, {2, "middle"}, {1, "front"}} {
		N := tc.N
		m, tokens := randomModel(4, 3)
		l, err := New(m, tokens, Config{NCtx: 3, Bottleneck: 2, NumPrompt: N, Mu: 2, Temp: 0.3, InitStd: 0.7, Seed: 4, Position: tc.pos})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(3, 3))
		img := gradcheck.Rand(rng, 5*6, 1)
		labels := []int{0, 3, 1, 2, 1}
		loss := func() float64 {
			v, _, _, err := l.Step(img, labels)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		_, terms, logits, err := l.Step(img, labels)
		if err != nil {
			t.Fatal(err)
		}
		if len(logits) != 5*N*4 {
			t.Errorf("N=%d %s: %d logits, want %d", N, tc.pos, len(logits), 5*N*4)
		}
		if terms["loss_con"] <= 0 || terms["cos_neg"] > 0.999 {
			t.Errorf("N=%d %s: terms %v: want a contrastive term away from its trivial point", N, tc.pos, terms)
		}
		grads := l.Grads().Clone() // each check's loss calls leave other gradients behind
		for name, p := range l.Params() {
			if err := gradcheck.Check(name, p.Data, grads[name].Data, loss, 1e-2, 2e-2, 40, rng); err != nil {
				t.Errorf("N=%d %s: %v", N, tc.pos, err)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.NCtx = 0 }, "n_ctx"},
		{func(c *Config) { c.Bottleneck = 0 }, "bottleneck"},
		{func(c *Config) { c.NumPrompt = 0 }, "num_prompt"},
		{func(c *Config) { c.Mu = -1 }, "mu"},
		{func(c *Config) { c.Temp = 0 }, "temp"},
		{func(c *Config) { c.InitStd = -1 }, "init_std"},
	} {
		c := DefaultConfig()
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one naming %q", err, tc.want)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Error(err)
	}
}

// TestAnchorConstant: f_0 does not move when the prompts train.
func TestAnchorConstant(t *testing.T) {
	m, tokens := randomModel(3, 3)
	l, err := New(m, tokens, Config{NCtx: 3, Bottleneck: 2, NumPrompt: 1, Mu: 1, Temp: 0.5, InitStd: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	f0 := append([]float32(nil), l.AnchorFeatures()...)
	want, err := m.EncodeText(tokens, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if d := f0[i] - want[i]; d > 1e-5 || d < -1e-5 {
			t.Fatalf("f_0[%d] = %v, Model.EncodeText %v", i, f0[i], want[i])
		}
	}
	for i := range l.Sigma.Data {
		l.Sigma.Data[i] += 0.3
	}
	if _, _, _, err := l.Step(make([]float32, 2*6), []int{0, 2}); err != nil {
		t.Fatal(err)
	}
	for i, v := range l.AnchorFeatures() {
		if v != f0[i] {
			t.Fatalf("f_0[%d] changed from %v to %v", i, f0[i], v)
		}
	}
}

// TestTextFeatures: inference features equal the f_P rows of a training step.
func TestTextFeatures(t *testing.T) {
	m, tokens := randomModel(3, 3)
	l, err := New(m, tokens, Config{NCtx: 3, Bottleneck: 2, NumPrompt: 2, Mu: 1, Temp: 0.5, InitStd: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := l.Step(make([]float32, 2*6), []int{0, 2}); err != nil {
		t.Fatal(err)
	}
	train := append([]float32(nil), l.fP...)
	got, err := l.TextFeatures()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(train) {
		t.Fatalf("%d features, want %d", len(got), len(train))
	}
	for i := range got {
		if d := got[i] - train[i]; d > 1e-5 || d < -1e-5 {
			t.Fatalf("feature %d: %v, training step %v", i, got[i], train[i])
		}
	}
}
