package maple

import (
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

// towerBlocks returns every block the learner runs, both encoders.
func towerBlocks(l *Learner) []*clip.Block {
	var out []*clip.Block
	for _, tw := range []*Tower{l.txt, l.img} {
		for _, s := range tw.segs {
			out = append(out, s.Blocks...)
		}
	}
	return out
}

// TestBF16StepGradients compares the whole step of a learner made after
// Model.SetPrecision(BF16) — the frozen weight products of every block of
// both encoders, forward and input gradient, in bfloat16 with float32
// accumulation — with the float32 step, which TestGradCheck checks against
// finite differences, at prompt depth 1 (shallow) and 3 (every block
// prompted): every learner block runs in bf16 (fp32 when the model does),
// the loss within 2%, the logits and every prompt-learner tensor's gradient
// within 8% (relative norm), and the gradients of ctx (text encoder and
// image encoder through the coupling) and of a coupling (image encoder
// alone) not equal to float32's.
func TestBF16StepGradients(t *testing.T) {
	for _, J := range []int{1, 3} {
		var P tensor.Named
		step := func(p gemm.Precision) (float64, []float32, tensor.Named) {
			m, tokens := randomModel(4, 2)
			if err := m.SetPrecision(p); err != nil {
				t.Fatal(err)
			}
			l, err := New(m, tokens, Config{NCtx: 2, Depth: J, InitStd: 1, Seed: uint64(J)})
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range towerBlocks(l) {
				if b.G != nil || b.Precision() != p {
					t.Fatalf("J %d: a learner block runs in %v with weight gradients %v, want %v without", J, b.Precision(), b.G != nil, p)
				}
			}
			if P == nil { // away from the small init, as TestGradCheck
				rng := rand.New(rand.NewPCG(2, uint64(J)))
				for _, name := range slices.Sorted(maps.Keys(l.Params())) {
					q := l.Params()[name]
					for i := range q.Data {
						q.Data[i] += float32(rng.NormFloat64() * 0.5)
					}
				}
				P = l.Params().Clone()
			}
			for name, q := range P {
				copy(l.Params()[name].Data, q.Data)
			}
			B := 5
			prefix := gradcheck.Rand(rand.New(rand.NewPCG(3, uint64(J))), B*l.T0*l.Dv, 1.5)
			v, _, logits, err := l.Step(prefix, []int{0, 3, 1, 2, 1})
			if err != nil {
				t.Fatal(err)
			}
			return v, slices.Clone(logits), l.Grads().Clone()
		}
		l32, z32, g32 := step(gemm.FP32)
		l16, z16, g16 := step(gemm.BF16)
		t.Logf("J %d: loss fp32 %.6g, bf16 (%s) %.6g", J, l32, gemm.BF16Backend(), l16)
		if math.Abs(l16-l32) > 0.02*math.Abs(l32) {
			t.Errorf("J %d: bf16 loss %.6g differs from fp32 %.6g by more than 2%%", J, l16, l32)
		}
		if d := gradcheck.RelNorm(z16, z32); d > 0.08 || d == 0 {
			t.Errorf("J %d: bf16 logits differ from fp32 by %.3g (relative norm), want in (0, 0.08]", J, d)
		}
		for _, name := range slices.Sorted(maps.Keys(g32)) {
			d := gradcheck.RelNorm(g16[name].Data, g32[name].Data)
			t.Logf("J %d %s: ‖bf16 − fp32‖/‖fp32‖ = %.3g", J, name, d)
			if d > 0.08 {
				t.Errorf("J %d %s: bf16 gradient differs from fp32 by %.3g (relative norm), want ≤ 0.08", J, name, d)
			}
		}
		for _, name := range []string{ParamCtx, ParamProjW} {
			if slices.Equal(g16[name].Data, g32[name].Data) {
				t.Errorf("J %d %s: bf16 gradient equals fp32: the encoders did not run in bf16", J, name)
			}
		}
		if J > 1 && slices.Equal(g16[ParamCouple(1, "weight")].Data, g32[ParamCouple(1, "weight")].Data) {
			t.Errorf("J %d: the coupling's bf16 gradient equals fp32: block 1 of the image encoder did not run in bf16", J)
		}
	}
}

// TestBF16FrozenWeightsUntouched trains two rounds in bf16 through the
// production path (Build, Fit, the training loop, FedAvg) and checks that
// the frozen CLIP weights are bit-identical to a fresh copy afterwards, that
// the model's blocks stayed frozen and in bf16, and that the global prompt
// learner moved.
func TestBF16FrozenWeightsUntouched(t *testing.T) {
	s := testSettings()
	const C = 4
	m, tokens := randomModel(C, s.NCtx)
	fresh, _ := randomModel(C, s.NCtx)
	if err := m.SetPrecision(gemm.BF16); err != nil {
		t.Fatal(err)
	}
	clients := methodtest.TensorClients(rand.New(rand.NewPCG(8, 1)), 2, 6, m.W.Config.Vision.ImageSize, C)
	depth, err := Method{}.Depth(s, 3)
	if err != nil {
		t.Fatal(err)
	}
	env, err := parity.TensorEnv(m, depth, tokens, C, clients, testOpts(), 5)
	if err != nil {
		t.Fatal(err)
	}
	defer env.TrainStore.Close()
	plan := methodtest.Build(t, Method{}, env, s)
	before := plan.Global().Clone()
	methodtest.Round(t, plan, 0, []int{0, 1})
	methodtest.Round(t, plan, 1, []int{0, 1})
	if !reflect.DeepEqual(m.W, fresh.W) {
		t.Error("training in bf16 changed the frozen CLIP weights")
	}
	for _, b := range append(slices.Clone(m.Vision.Stack.Blocks), m.Text.Stack.Blocks...) {
		if b.G != nil || b.Precision() != gemm.BF16 {
			t.Fatal("a block has weight gradients or left bf16 after training")
		}
	}
	after := plan.Global()
	for _, name := range []string{ParamCtx, ParamText(1), ParamCouple(1, "weight")} {
		if slices.Equal(before[name].Data, after[name].Data) {
			t.Errorf("%s did not move in two rounds: nothing was trained", name)
		}
	}
}
