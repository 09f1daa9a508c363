package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func TestBF16Rounding(t *testing.T) {
	for _, tc := range []struct {
		in   float32
		want uint16
	}{
		{1, 0x3f80}, {-2, 0xc000},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie, even below
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie, even above
		{math.Float32frombits(0x3f808001), 0x3f81}, // above the tie
		{float32(math.Inf(1)), 0x7f80},
	} {
		if got := ToBF16(tc.in); got != tc.want {
			t.Errorf("ToBF16(%v) = %#04x, want %#04x", tc.in, got, tc.want)
		}
	}
	if nan := FromBF16(ToBF16(float32(math.NaN()))); !math.IsNaN(float64(nan)) {
		t.Errorf("NaN rounds to %v", nan)
	}
	if _, err := NewBF16Weights(make([]float32, 5), 2, 3); err == nil {
		t.Error("NewBF16Weights accepted 5 values for 2×3")
	}
	if p, err := ParsePrecision("bf16"); err != nil || p != BF16 || p.String() != "bf16" {
		t.Errorf("ParsePrecision(bf16) = %v, %v", p, err)
	}
	if _, err := ParsePrecision("fp16"); err == nil {
		t.Error("ParsePrecision accepted fp16")
	}
}

// TestMatMulBF16 checks every mode (forward with Wᵀ, backward with W, bias,
// accumulation, a row view) against float64 products of the operands rounded
// to bfloat16: only the float32 accumulation order may differ.
func TestMatMulBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, s := range []struct{ m, n, k int }{{1, 1, 1}, {5, 7, 3}, {67, 45, 130}, {200, 96, 768}} {
		for _, transW := range []bool{true, false} {
			for _, mode := range []string{"plain", "bias", "accumulate", "bias+accumulate", "view"} {
				t.Run(fmt.Sprintf("%dx%dx%d/%v/%s", s.m, s.n, s.k, transW, mode), func(t *testing.T) {
					m, n, k := s.m, s.n, s.k
					a := randVec(rng, m*k)
					wr, wc := k, n
					if transW {
						wr, wc = n, k
					}
					extra := 0
					if mode == "view" {
						extra = 3
					}
					wf := randVec(rng, (wr+extra)*wc)
					full, err := NewBF16Weights(wf, wr+extra, wc)
					if err != nil {
						t.Fatal(err)
					}
					w := full
					wv := wf
					if mode == "view" {
						w, wv = full.RowRange(extra, extra+wr), wf[extra*wc:]
					}
					var bias []float32
					if mode == "bias" || mode == "bias+accumulate" {
						bias = randVec(rng, n)
					}
					acc := mode == "accumulate" || mode == "bias+accumulate"
					c0 := randVec(rng, m*n)
					c := append([]float32(nil), c0...)
					MatMulBF16(transW, m, n, k, a, w, bias, c, acc)
					worst := 0.0
					for i := 0; i < m; i++ {
						for j := 0; j < n; j++ {
							var sum, mag float64
							for p := 0; p < k; p++ {
								var wij float32
								if transW {
									wij = wv[j*wc+p]
								} else {
									wij = wv[p*wc+j]
								}
								x := float64(RoundBF16(a[i*k+p])) * float64(RoundBF16(wij))
								sum += x
								mag += math.Abs(x)
							}
							if bias != nil {
								sum += float64(bias[j])
							}
							if acc {
								sum += float64(c0[i*n+j])
							}
							if e := math.Abs(float64(c[i*n+j])-sum) / (mag + 1); e > worst {
								worst = e
							}
						}
					}
					if worst > 1e-5 {
						t.Fatalf("%s: worst error %.3g relative to Σ|a·w|, want float32 accumulation (< 1e-5)", BF16Backend(), worst)
					}
				})
			}
		}
	}
}

// BenchmarkViTShapesBF16 is BenchmarkViTShapes with bfloat16 weights,
// reordered once into oneDNN's preferred layout.
func BenchmarkViTShapesBF16(b *testing.B) { benchViTShapesBF16(b) }

func benchViTShapesBF16(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range []struct{ n, k int }{{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}} {
		m := 32 * 197
		b.Run(fmt.Sprintf("%dx%dx%d", m, s.n, s.k), func(b *testing.B) {
			x, y := randVec(rng, m*s.k), make([]float32, m*s.n)
			w, err := NewBF16Weights(randVec(rng, s.n*s.k), s.n, s.k)
			if err != nil {
				b.Fatal(err)
			}
			MatMulBF16(true, m, s.n, s.k, x, w, nil, y, false)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				MatMulBF16(true, m, s.n, s.k, x, w, nil, y, false)
			}
			b.ReportMetric(2*float64(m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
