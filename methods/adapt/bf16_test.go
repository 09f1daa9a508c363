package adapt

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestBF16StepGradients compares the whole step of a learner made after
// Model.SetPrecision(BF16) — the frozen products of the image encoder (and
// the last block's q|k), and of the text encoder, forward and input
// gradient, in bfloat16 with float32 accumulation — with the float32 step,
// which TestStepGradients checks against finite differences: the loss
// within 2%, every trained parameter's gradient within 8% (relative norm),
// and the visual and own text prompts' gradients not equal to float32's
// (both encoders ran in bfloat16).
func TestBF16StepGradients(t *testing.T) {
	cfg := Config{Domains: 3, NCtx: 2, InitStd: 0.5, VisualStd: 1, Tau: 0.5, Lambda: 1, AdaLN: true, AdaLNLayers: 2, Seed: 1}
	const C, B, own = 4, 3, 1
	labels := []int{0, 3, 2}
	var P tensor.Named
	step := func(p gemm.Precision) (float64, tensor.Named) {
		m := tinyModel()
		m.W.LogitScale = 1
		if err := m.SetPrecision(p); err != nil {
			t.Fatal(err)
		}
		l, err := NewLearner(m, tinyTokens(m, cfg.NCtx, C), cfg)
		if err != nil {
			t.Fatal(err)
		}
		x0 := clip.ImagePrefix(m, 1, gradcheck.Rand(rand.New(rand.NewPCG(2, 2)), B*3*8*8, 1), B, nil)
		if P == nil {
			P = InitParams(cfg, l.Dt, l.Dv, l.E)
			rng := rand.New(rand.NewPCG(6, 1))
			for name, q := range P {
				if Averaged(name) && name != ParamVisual {
					copy(q.Data, gradcheck.Rand(rng, len(q.Data), 0.3))
				}
			}
		}
		G := zerosLike(P)
		v, _, _, err := l.Step(P, G, x0, labels, own)
		if err != nil {
			t.Fatal(err)
		}
		return v, G
	}
	l32, g32 := step(gemm.FP32)
	l16, g16 := step(gemm.BF16)
	t.Logf("loss fp32 %.6g, bf16 (%s) %.6g", l32, gemm.BF16Backend(), l16)
	if math.Abs(l16-l32) > 0.02*math.Abs(l32) {
		t.Errorf("bf16 loss %.6g differs from fp32 %.6g by more than 2%%", l16, l32)
	}
	for name, g := range g32 {
		if Relayed(name) && name != TextName(own) {
			continue
		}
		d := gradcheck.RelNorm(g16[name].Data, g.Data)
		t.Logf("%s: ‖bf16 − fp32‖/‖fp32‖ = %.3g", name, d)
		if d > 0.08 {
			t.Errorf("%s: bf16 gradient differs from fp32 by %.3g (relative norm), want ≤ 0.08", name, d)
		}
		if d == 0 && (name == ParamVisual || name == TextName(own)) {
			t.Errorf("%s: bf16 gradient equals fp32: the encoder did not run in bf16", name)
		}
	}
}

// TestBF16FrozenWeightsUntouched trains two rounds in bf16 through the
// production path (Build, Fit, the training loop) and checks that the
// frozen CLIP weights are bit-identical to a fresh copy afterwards, that the
// model's blocks stayed frozen and in bf16, and that the prompts moved.
func TestBF16FrozenWeightsUntouched(t *testing.T) {
	s := DefaultSettings()
	s.NCtx, s.LR = 2, 0.05
	m, tokens := methodtest.PromptModel(s.NCtx)
	fresh, _ := methodtest.PromptModel(s.NCtx)
	if err := m.SetPrecision(gemm.BF16); err != nil {
		t.Fatal(err)
	}
	const C = methodtest.PromptClasses
	clients := methodtest.TensorClients(rand.New(rand.NewPCG(8, 1)), 2, 10, 8, C)
	env, err := parity.TensorEnv(m, 1, tokens, C, clients, train.Options{Epochs: 1, Batch: 4}, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer env.TrainStore.Close()
	env.Task.Clients[1].Domain = 1
	plan := methodtest.Build(t, Method{}, env, s)
	before := plan.Clients[0].(*client.Client).P.Clone()
	round(t, plan, 0)
	round(t, plan, 1)
	if !reflect.DeepEqual(m.W, fresh.W) {
		t.Error("training in bf16 changed the frozen CLIP weights")
	}
	for _, b := range append(slices.Clone(m.Vision.Stack.Blocks), m.Text.Stack.Blocks...) {
		if b.G != nil || b.Precision() != gemm.BF16 {
			t.Fatal("a block has weight gradients or left bf16 after training")
		}
	}
	after := plan.Clients[0].(*client.Client).P
	for _, name := range []string{ParamVisual, TextName(0)} {
		if slices.Equal(before[name].Data, after[name].Data) {
			t.Errorf("%s did not move in two rounds: nothing was trained", name)
		}
	}
}
