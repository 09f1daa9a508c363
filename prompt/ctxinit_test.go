package prompt

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestFillContext: ctx_init's values are copied as they are, a wrong count
// is refused naming ctx_init, and without them the context is the method's
// N(0, std²) draw of PCG(seed, salt) in order (the oracle: the draw written
// out, as KgCoOp and ProGrad made it before they shared FillContext).
func TestFillContext(t *testing.T) {
	const nCtx, D = 2, 4
	init := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	ctx := make([]float32, nCtx*D)
	if err := FillContext(ctx, init, nCtx, D, 1, 0x6bc0, 0.02); err != nil {
		t.Fatal(err)
	}
	for i := range init {
		if ctx[i] != init[i] {
			t.Fatalf("ctx[%d] = %g, want ctx_init's %g", i, ctx[i], init[i])
		}
	}
	err := FillContext(ctx, init[:3], nCtx, D, 1, 0x6bc0, 0.02)
	if err == nil || !strings.Contains(err.Error(), "ctx_init gives 3 values, want 2 × 4") {
		t.Fatalf("3 ctx_init values for [2, 4]: error %v, want one naming ctx_init and the counts", err)
	}
	for _, salt := range []uint64{0x6bc0, 0x960d} {
		if err := FillContext(ctx, nil, nCtx, D, 5, salt, 0.02); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(5, salt))
		for i, v := range ctx {
			if want := float32(rng.NormFloat64() * 0.02); v != want {
				t.Fatalf("salt %#x: ctx[%d] = %g, want the draw's %g", salt, i, v, want)
			}
		}
	}
}
