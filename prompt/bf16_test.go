package prompt

import (
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
)

// TestBF16Encoder: an encoder made after Model.SetPrecision(BF16) runs the
// frozen text blocks' products in bfloat16, on the shared-prefix path and
// the plain one: features and context gradients differ from float32 (the
// bfloat16 path ran) by at most 3% (relative norm).
func TestBF16Encoder(t *testing.T) {
	m := tinyModel(t)
	const R, n, G = 6, 3, 2
	tokens := tinyTokens(R, n, 12)
	run := func(p gemm.Precision, share bool) (feat, dctx []float32) {
		if err := m.SetPrecision(p); err != nil {
			t.Fatal(err)
		}
		defer m.SetPrecision(gemm.FP32)
		e, err := NewEncoder(m, tokens, n)
		if err != nil {
			t.Fatal(err)
		}
		e.noShare = !share
		ctx := gradcheck.Rand(rand.New(rand.NewPCG(1, 1)), G*n*e.D, 1)
		f, err := e.Forward(ctx, G, true)
		if err != nil {
			t.Fatal(err)
		}
		if e.usedPack != share {
			t.Fatalf("shared-prefix path taken: %v, want %v", e.usedPack, share)
		}
		rw := gradcheck.Rand(rand.New(rand.NewPCG(2, 2)), R*e.E, 1)
		return append([]float32(nil), f...), append([]float32(nil), e.Backward(rw)...)
	}
	for _, share := range []bool{true, false} {
		f32, d32 := run(gemm.FP32, share)
		f16, d16 := run(gemm.BF16, share)
		for _, c := range []struct {
			name     string
			got, ref []float32
		}{{"features", f16, f32}, {"context gradient", d16, d32}} {
			r := gradcheck.RelNorm(c.got, c.ref)
			t.Logf("shared %v, %s: ‖bf16 − fp32‖/‖fp32‖ = %.3g (%s)", share, c.name, r, gemm.BF16Backend())
			if r == 0 || r > 0.03 {
				t.Errorf("shared %v, %s: relative difference %.3g, want in (0, 0.03]", share, c.name, r)
			}
		}
	}
}
