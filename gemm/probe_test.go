package gemm

import (
	"testing"
	"time"
)

// TestChoose: auto takes bf16 only when measured clearly faster (the Intel
// avx512_bf16 machine without AMX measured it slower than fp32).
func TestChoose(t *testing.T) {
	for _, c := range []struct {
		fp32, bf16 float64
		want       Precision
	}{{200, 350, BF16}, {200, 132, FP32}, {200, 205, FP32}, {200, 0, FP32}, {100, 105, BF16}} {
		if got := choose(c.fp32, c.bf16); got != c.want {
			t.Errorf("fp32 %v, bf16 %v GFLOP/s: chose %s, want %s", c.fp32, c.bf16, got, c.want)
		}
	}
}

// TestProbePrecision: the probe measures both rates (bf16 only where it is
// not emulated), within its budget, and chooses by them.
func TestProbePrecision(t *testing.T) {
	p := ProbePrecision([]Shape{{M: 64, N: 96, K: 64}, {M: 64, N: 64, K: 96}}, 50*time.Millisecond)
	if p.FP32GFLOPS <= 0 {
		t.Fatalf("no fp32 rate: %+v", p)
	}
	if emulated := BF16Backend() == "emulated"; emulated != (p.BF16GFLOPS == 0) {
		t.Errorf("%s bf16: rate %v", BF16Backend(), p.BF16GFLOPS)
	}
	if p.Chosen != choose(p.FP32GFLOPS, p.BF16GFLOPS) {
		t.Errorf("chose %s from %+v", p.Chosen, p)
	}
	if p.Seconds > 5 {
		t.Errorf("the probe took %.1f s for a 50 ms budget", p.Seconds)
	}
	if got, err := ParsePrecision("auto"); err != nil || got != Auto || got.String() != "auto" {
		t.Errorf("ParsePrecision(auto) = %v, %v", got, err)
	}
}
