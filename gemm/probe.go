package gemm

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Shape is one product C[M,N] = A[M,K]·Wᵀ with W [N,K], a linear layer.
type Shape struct{ M, N, K int }

// Probe is what ProbePrecision measured: both rates at the model's shapes
// and the precision chosen.
type Probe struct {
	FP32GFLOPS float64   `json:"fp32_gflops"`
	BF16GFLOPS float64   `json:"bf16_gflops"` // 0 where bf16 is only emulated
	Chosen     Precision `json:"-"`
	Seconds    float64   `json:"probe_seconds"`
}

// String is one log line: both rates and the choice.
func (p Probe) String() string {
	bf := "emulated, not timed"
	if p.BF16GFLOPS > 0 {
		bf = fmt.Sprintf("%.0f GFLOP/s", p.BF16GFLOPS)
	}
	return fmt.Sprintf("fp32 %.0f GFLOP/s, bf16 %s: %s (probe %.2f s)", p.FP32GFLOPS, bf, p.Chosen, p.Seconds)
}

// autoMargin is how much faster bf16 must be measured for auto to take it:
// below it, timing noise would decide, and fp32 is the exact path.
const autoMargin = 1.05

// ProbePrecision times the float32 and the bfloat16 products at shapes
// (each precision for about budget/2, after one warm-up product per shape)
// and chooses BF16 when it is measured at least autoMargin faster, else
// FP32. Where bfloat16 is only emulated (no oneDNN) it chooses FP32 without
// timing it: emulation is always slower.
func ProbePrecision(shapes []Shape, budget time.Duration) Probe {
	t0 := time.Now()
	rng := rand.New(rand.NewPCG(7, 8))
	type operands struct {
		a, w, c []float32
		wb      *BF16Weights
	}
	ops := make([]operands, len(shapes))
	for i, s := range shapes {
		ops[i] = operands{a: randFloats(rng, s.M*s.K), w: randFloats(rng, s.N*s.K), c: make([]float32, s.M*s.N)}
	}
	rate := func(run func(i int, s Shape)) float64 {
		for i, s := range shapes {
			run(i, s) // warm-up: primitives made, buffers grown
		}
		var flops float64
		start := time.Now()
		for time.Since(start) < budget/2 {
			for i, s := range shapes {
				run(i, s)
				flops += 2 * float64(s.M) * float64(s.N) * float64(s.K)
			}
		}
		return flops / time.Since(start).Seconds() / 1e9
	}
	p := Probe{Chosen: FP32}
	p.FP32GFLOPS = rate(func(i int, s Shape) {
		MatMul(false, true, s.M, s.N, s.K, ops[i].a, ops[i].w, ops[i].c, false)
	})
	if BF16Backend() != "emulated" {
		for i, s := range shapes {
			ops[i].wb, _ = NewBF16Weights(ops[i].w, s.N, s.K)
		}
		p.BF16GFLOPS = rate(func(i int, s Shape) {
			MatMulBF16(true, s.M, s.N, s.K, ops[i].a, ops[i].wb, nil, ops[i].c, false)
		})
		if p.BF16GFLOPS >= autoMargin*p.FP32GFLOPS {
			p.Chosen = BF16
		}
	}
	p.Seconds = time.Since(t0).Seconds()
	return p
}

func randFloats(rng *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = rng.Float32() - 0.5
	}
	return out
}
