package gemm

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Precision selects the arithmetic of the products with frozen weights.
type Precision int

const (
	// FP32 is single precision throughout (the default, fixture-exact).
	FP32 Precision = iota
	// BF16 rounds the frozen weights and the activations multiplied by them
	// to bfloat16 and accumulates in float32.
	BF16
	// Auto is BF16 where a start-up probe at the model's shapes measures it
	// faster than FP32 on this machine, else FP32 (ProbePrecision).
	Auto
)

// String is the configuration spelling: "fp32", "bf16" or "auto".
func (p Precision) String() string {
	switch p {
	case BF16:
		return "bf16"
	case Auto:
		return "auto"
	}
	return "fp32"
}

// ParsePrecision reads "fp32" (or ""), "bf16" (also "bfloat16") and "auto".
func ParsePrecision(s string) (Precision, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "fp32", "float32":
		return FP32, nil
	case "bf16", "bfloat16":
		return BF16, nil
	case "auto":
		return Auto, nil
	}
	return FP32, fmt.Errorf("gemm: unknown precision %q (want fp32, bf16 or auto)", s)
}

// BF16Backend names the implementation of MatMulBF16: "onednn" (bfloat16
// products with float32 accumulation in oneDNN) or "emulated" (operands
// rounded to bfloat16, products in float32 through Sgemm: the same rounding,
// several times slower; the purego and nodnnl builds).
func BF16Backend() string { return bf16Backend }

// BF16Weights is a weight matrix of Rows×Cols float32 values rounded once to
// bfloat16 (round to nearest even), row-major. It is made once from frozen
// weights and then serves both the forward product (x·Wᵀ) and the backward
// one (dy·W).
type BF16Weights struct {
	Rows, Cols int
	bits       []uint16  // bfloat16 values (oneDNN)
	f32        []float32 // the same values widened back to float32 (emulation)
	packs      packs     // bits reordered into oneDNN's layouts (made on first use)
}

// NewBF16Weights rounds w [rows, cols] (row-major) to bfloat16. It returns
// an error when w is shorter than rows·cols.
func NewBF16Weights(w []float32, rows, cols int) (*BF16Weights, error) {
	if rows < 0 || cols < 0 || len(w) < rows*cols {
		return nil, fmt.Errorf("gemm: bf16 weights %d×%d from %d values", rows, cols, len(w))
	}
	b := &BF16Weights{Rows: rows, Cols: cols}
	newBF16Storage(b, w[:rows*cols])
	return b, nil
}

// RowRange is the view of rows [lo, hi) (no copy), such as the key and value
// part of a fused q|k|v projection.
func (w *BF16Weights) RowRange(lo, hi int) *BF16Weights {
	v := &BF16Weights{Rows: hi - lo, Cols: w.Cols}
	if w.bits != nil {
		v.bits = w.bits[lo*w.Cols : hi*w.Cols]
	}
	if w.f32 != nil {
		v.f32 = w.f32[lo*w.Cols : hi*w.Cols]
	}
	return v
}

// ToBF16 rounds x to the nearest bfloat16 (ties to even) and returns its bits.
func ToBF16(x float32) uint16 {
	u := math.Float32bits(x)
	if u&0x7fffffff > 0x7f800000 { // NaN stays NaN
		return uint16(u>>16) | 0x40
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// FromBF16 widens bfloat16 bits to float32 (exact).
func FromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// RoundBF16 is x rounded to bfloat16 and widened back.
func RoundBF16(x float32) float32 { return FromBF16(ToBF16(x)) }

// MatMulBF16 computes C[m,n] (+)= A[m,k]·op(W) (+ bias) in bfloat16 with
// float32 accumulation: A (row-major, float32) is rounded to bfloat16 on the
// fly. With transW op(W) = Wᵀ and W is [n, k] (a PyTorch Linear weight,
// x·Wᵀ); otherwise W is [k, n] (the backward product dy·W). bias [n], when
// not nil, is added to every row of C (in float32). With accumulate the
// product is added to C, else C is overwritten.
func MatMulBF16(transW bool, m, n, k int, a []float32, w *BF16Weights, bias, c []float32, accumulate bool) {
	if m == 0 || n == 0 {
		return
	}
	wr, wc := k, n
	if transW {
		wr, wc = n, k
	}
	if w.Rows != wr || w.Cols != wc {
		panic(fmt.Sprintf("gemm: bf16 weights are %d×%d, product needs %d×%d", w.Rows, w.Cols, wr, wc))
	}
	if len(a) < m*k || len(c) < m*n || (bias != nil && len(bias) < n) {
		panic(fmt.Sprintf("gemm: bf16 product %d×%d×%d: A %d, C %d, bias %d values", m, n, k, len(a), len(c), len(bias)))
	}
	if k == 0 {
		if !accumulate {
			clear(c[:m*n])
		}
		if bias != nil {
			for i := 0; i < m; i++ {
				row := c[i*n : i*n+n]
				for j, v := range bias[:n] {
					row[j] += v
				}
			}
		}
		return
	}
	if !statsOn.Load() || inParallel.Load() > 0 {
		matMulBF16(transW, m, n, k, a, w, bias, c, accumulate)
		return
	}
	t0 := time.Now()
	matMulBF16(transW, m, n, k, a, w, bias, c, accumulate)
	statNanos.Add(int64(time.Since(t0)))
	statFlops.Add(2 * int64(m) * int64(n) * int64(k))
	statCalls.Add(1)
}

// emulatedMatMulBF16 is MatMulBF16 by rounding A to bfloat16 and calling
// Sgemm on the widened values: every product of two bfloat16 values is
// exact in float32, so only the order of the float32 additions differs from
// a native bfloat16 kernel.
func emulatedMatMulBF16(transW bool, m, n, k int, a []float32, w *BF16Weights, bias, c []float32, accumulate bool) {
	ar := make([]float32, m*k)
	for i, v := range a[:m*k] {
		ar[i] = RoundBF16(v)
	}
	wf := w.f32
	if wf == nil {
		wf = make([]float32, len(w.bits))
		for i, h := range w.bits {
			wf[i] = FromBF16(h)
		}
	}
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	if bias != nil {
		if !accumulate {
			for i := 0; i < m; i++ {
				copy(c[i*n:i*n+n], bias[:n])
			}
		} else {
			for i := 0; i < m; i++ {
				row := c[i*n : i*n+n]
				for j, v := range bias[:n] {
					row[j] += v
				}
			}
		}
		beta = 1
	}
	ldw := n
	if transW {
		ldw = k
	}
	sgemm(false, transW, m, n, k, 1, ar, k, wf, ldw, beta, c, n)
}
