package nn

import (
	"math"
	"runtime"

	"github.com/pfedmma/pfedmma/gemm"
)

// Mask says which keys each query may attend to.
type Mask struct {
	// Causal restricts query i to keys 0..i (the text transformer).
	Causal bool
	// QPos, when set, gives the sequence position of batch row b's queries
	// (used when a pruned block computes a single query per row: the class
	// token or the EOT token); it replaces i in the causal rule.
	QPos []int
}

// visible is the number of keys query i of batch row b can see.
func (m Mask) visible(b, i, Tk int) int {
	if !m.Causal {
		return Tk
	}
	p := i
	if m.QPos != nil {
		p = m.QPos[b]
	}
	return min(p+1, Tk)
}

// AttentionShape fixes the sizes and row strides of one attention call.
// Queries, keys and values are read in place from wider rows (the fused
// q|k|v projection output), so each has a row stride.
type AttentionShape struct {
	B, Tq, Tk int // batch, queries per row, keys per row
	H, Dh     int // heads and head width (model width D = H·Dh)
	QStride   int // distance between consecutive query rows in q
	KVStride  int // distance between consecutive key (and value) rows in k and v
}

// AttentionForward is multi-head scaled dot-product attention.
//
//	q: query row (b,i), head h at q[(b·Tq+i)·QStride + h·Dh :][:Dh]
//	k, v: key/value row (b,j), head h at k[(b·Tk+j)·KVStride + h·Dh :][:Dh]
//	probs: [B, H, Tq, Tk] softmax(q·kᵀ/√Dh) with masked entries 0 (saved)
//	out: [B, Tq, D], D = H·Dh: out = probs · v, heads side by side
//
// The (batch, head) pairs are independent small products; they run in
// parallel, each with single-threaded GEMMs.
func AttentionForward(out, probs, q, k, v []float32, s AttentionShape, mask Mask) {
	D := s.H * s.Dh
	scale := float32(1 / math.Sqrt(float64(s.Dh)))
	n := s.Tq * s.Tk
	gemm.Parallel(s.B*s.H, runtime.GOMAXPROCS(0), func(bh int) {
		b, h := bh/s.H, bh%s.H
		p := probs[bh*n : (bh+1)*n]
		// p_bh = scale · q_bh · k_bhᵀ        [Tq, Tk]
		gemm.Sgemm(false, true, s.Tq, s.Tk, s.Dh, scale, q[b*s.Tq*s.QStride+h*s.Dh:], s.QStride,
			k[b*s.Tk*s.KVStride+h*s.Dh:], s.KVStride, 0, p, s.Tk)
		for i := 0; i < s.Tq; i++ {
			softmaxRowKernel(p[i*s.Tk:(i+1)*s.Tk], mask.visible(b, i, s.Tk))
		}
		// out_bh = p_bh · v_bh               [Tq, Dh] written with row stride D
		gemm.Sgemm(false, false, s.Tq, s.Dh, s.Tk, 1, p, s.Tk,
			v[b*s.Tk*s.KVStride+h*s.Dh:], s.KVStride, 0, out[b*s.Tq*D+h*s.Dh:], D)
	})
}

// AttentionBackward accumulates the gradients of AttentionForward with respect
// to q, k and v (same layouts and strides as the inputs).
//
//	dout: [B, Tq, D]; probs: from the forward pass; scratch: ≥ B·H·Tq·Tk floats
//	dq, dk, dv: += (dq may be nil when query gradients are not needed)
func AttentionBackward(dq, dk, dv, dout, probs, q, k, v, scratch []float32, s AttentionShape) {
	D := s.H * s.Dh
	scale := float32(1 / math.Sqrt(float64(s.Dh)))
	n := s.Tq * s.Tk
	gemm.Parallel(s.B*s.H, runtime.GOMAXPROCS(0), func(bh int) {
		b, h := bh/s.H, bh%s.H
		qo := b*s.Tq*s.QStride + h*s.Dh
		ko := b*s.Tk*s.KVStride + h*s.Dh
		do := dout[b*s.Tq*D+h*s.Dh:]
		p := probs[bh*n : (bh+1)*n]
		dp := scratch[bh*n : (bh+1)*n]
		// dp_bh = dout_bh · v_bhᵀ            [Tq, Tk]
		gemm.Sgemm(false, true, s.Tq, s.Tk, s.Dh, 1, do, D, v[ko:], s.KVStride, 0, dp, s.Tk)
		// dv_bh += p_bhᵀ · dout_bh           [Tk, Dh]
		gemm.Sgemm(true, false, s.Tk, s.Dh, s.Tq, 1, p, s.Tk, do, D, 1, dv[ko:], s.KVStride)
		// ds = p ⊙ (dp − Σ_j dp⊙p) · scale, in place (softmax backward)
		for i := 0; i < s.Tq; i++ {
			softmaxBackwardRowKernel(p[i*s.Tk:(i+1)*s.Tk], dp[i*s.Tk:(i+1)*s.Tk], scale)
		}
		// dq_bh += ds · k_bh                  [Tq, Dh]
		if dq != nil {
			gemm.Sgemm(false, false, s.Tq, s.Dh, s.Tk, 1, dp, s.Tk, k[ko:], s.KVStride, 1, dq[qo:], s.QStride)
		}
		// dk_bh += dsᵀ · q_bh                 [Tk, Dh]
		gemm.Sgemm(true, false, s.Tk, s.Dh, s.Tq, 1, dp, s.Tk, q[qo:], s.QStride, 1, dk[ko:], s.KVStride)
	})
}
