package promptfl

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/tensor"
)

// randomModel is a 2-block text tower (context 12) with embeddings scaled up
// so the blocks work away from their linear regime; tokens are C rows
// "SOT X… c… . EOT" with 1..3 class tokens.
func randomModel(C, nCtx int) (*clip.Model, []int) {
	return methodtest.TinyCLIP{EmbedDim: 6, VisionLayers: 1, TextLayers: 2, EmbScale: 50}.Prompts(C, nCtx)
}

func TestGradCheck(t *testing.T) {
	for _, tc := range []struct {
		csc bool
		pos string
	}{{false, ""}, {true, ""}, {false, "middle"}, {true, "middle"}, {false, "front"}} {
		csc := tc.csc
		m, tokens := randomModel(4, 3)
		l, err := New(m, tokens, Config{NCtx: 3, ClassSpecific: csc, InitStd: 1, Seed: 1, ProxMu: 0.7, Position: tc.pos})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(2, 2))
		global := tensor.Named{ParamCtx: l.ctx.Clone()}
		for i := range global[ParamCtx].Data {
			global[ParamCtx].Data[i] += float32(rng.NormFloat64())
		}
		if err := l.SetGlobal(global); err != nil {
			t.Fatal(err)
		}
		img := gradcheck.Rand(rng, 5*6, 1)
		labels := []int{0, 3, 1, 2, 1}
		loss := func() float64 {
			v, _, _, err := l.Step(img, labels)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		_, terms, _, err := l.Step(img, labels)
		if err != nil {
			t.Fatal(err)
		}
		if terms["loss_prox"] <= 0 {
			t.Errorf("csc %v: FedProx term %v, want > 0", csc, terms["loss_prox"])
		}
		grad := l.grad.Clone().Data
		if err := gradcheck.Check("ctx", l.ctx.Data, grad, loss, 1e-2, 2e-2, 60, rng); err != nil {
			t.Errorf("csc %v position %q: %v", csc, tc.pos, err)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.NCtx = 0 }, "n_ctx"},
		{func(c *Config) { c.ProxMu = -1 }, "prox_mu"},
		{func(c *Config) { c.InitStd = -0.1 }, "init_std"},
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

func TestStepErrors(t *testing.T) {
	m, tokens := randomModel(4, 3)
	l, err := New(m, tokens, Config{NCtx: 3, InitStd: 0.02})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := l.Step(make([]float32, 12), []int{0, 4}); err == nil || !strings.Contains(err.Error(), "label 4") {
		t.Errorf("label 4 of 4 classes: error %v", err)
	}
	if _, _, _, err := l.Step(make([]float32, 11), []int{0, 1}); err == nil {
		t.Error("short image features: no error")
	}
	if _, err := New(m, tokens, Config{NCtx: 9}); err == nil {
		t.Error("n_ctx past the EOT: no error")
	}
}
