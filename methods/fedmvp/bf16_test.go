package fedmvp

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestBF16StepGradients compares the step of a learner made after
// Model.SetPrecision(BF16) — the prompted image encoder's frozen weight
// products, forward and input gradient, in bfloat16 with float32
// accumulation — with the float32 step, which TestGradCheck checks against
// finite differences: every learner block runs in the model's precision
// without weight gradients, the loss is within 2%, the logits and every
// trained tensor's gradient within 8% (relative norm; not β of the keys'
// LayerNorm, whose exact gradient is 0), and the gradient of
// the cross-attention (reached only through the image blocks)
// is not float32's, so the blocks did run in bf16.
func TestBF16StepGradients(t *testing.T) {
	var P tensor.Named
	step := func(p gemm.Precision) (float64, []float32, tensor.Named) {
		m := randomModel()
		if err := m.SetPrecision(p); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(5, 7))
		rows := []int{0, 1, 0, 2, 2, 2}
		l, err := New(m, gradcheck.Rand(rng, len(rows)*6, 1), rows, 3, Config{Alpha: 2, Heads: 2, Rank: 2, Prompts: 3, Seed: 4})
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range l.stack.Blocks {
			if b.G != nil || b.Precision() != p {
				t.Fatalf("image block %d of the learner runs in %v with weight gradients %v, want %v without", i, b.Precision(), b.G != nil, p)
			}
		}
		if P == nil { // away from the small init, as TestGradCheck
			for _, name := range slices.Sorted(maps.Keys(l.Params())) {
				q := l.Params()[name]
				for i := range q.Data {
					q.Data[i] += float32(rng.NormFloat64() * 0.3)
				}
			}
			P = l.Params().Clone()
		}
		for name, q := range P {
			copy(l.Params()[name].Data, q.Data)
		}
		B := 4
		rec := gradcheck.Rand(rand.New(rand.NewPCG(6, 1)), B*l.RecordLen(), 1.5)
		v, _, logits, err := l.Step(rec, []int{0, 2, 1, 2})
		if err != nil {
			t.Fatal(err)
		}
		return v, slices.Clone(logits), l.Grads().Clone()
	}
	l32, z32, g32 := step(gemm.FP32)
	l16, z16, g16 := step(gemm.BF16)
	t.Logf("loss fp32 %.6g, bf16 (%s) %.6g", l32, gemm.BF16Backend(), l16)
	if math.Abs(l16-l32) > 0.02*math.Abs(l32) {
		t.Errorf("bf16 loss %.6g differs from fp32 %.6g by more than 2%%", l16, l32)
	}
	if d := gradcheck.RelNorm(z16, z32); d > 0.08 || d == 0 {
		t.Errorf("bf16 logits differ from fp32 by %.3g (relative norm), want in (0, 0.08]", d)
	}
	for _, name := range slices.Sorted(maps.Keys(g32)) {
		if !Trained(name, false) || name == ParamNormKB {
			continue // frozen, or ≈ 0 in exact arithmetic (TestGradCheck): rounding noise
		}
		d := gradcheck.RelNorm(g16[name].Data, g32[name].Data)
		t.Logf("%s: ‖bf16 − fp32‖/‖fp32‖ = %.3g", name, d)
		if d > 0.08 {
			t.Errorf("%s: bf16 gradient differs from fp32 by %.3g (relative norm), want ≤ 0.08", name, d)
		}
	}
	if slices.Equal(g16[ParamInW].Data, g32[ParamInW].Data) {
		t.Errorf("%s: bf16 gradient equals fp32: the image blocks did not run in bf16", ParamInW)
	}
}
