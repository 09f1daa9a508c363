package nn

import (
	"math"

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
func AttentionForward(out, probs, q, k, v []float32, s AttentionShape, mask Mask) {
	D := s.H * s.Dh
	scale := float32(1 / math.Sqrt(float64(s.Dh)))
	for b := 0; b < s.B; b++ {
		for h := 0; h < s.H; h++ {
			qb := q[b*s.Tq*s.QStride+h*s.Dh:]
			kb := k[b*s.Tk*s.KVStride+h*s.Dh:]
			vb := v[b*s.Tk*s.KVStride+h*s.Dh:]
			p := probs[(b*s.H+h)*s.Tq*s.Tk : (b*s.H+h+1)*s.Tq*s.Tk]
			// p = scale · q_bh · k_bhᵀ    [Tq, Tk]
			gemm.Sgemm(false, true, s.Tq, s.Tk, s.Dh, scale, qb, s.QStride, kb, s.KVStride, 0, p, s.Tk)
			softmaxRows(p, s.Tq, s.Tk, func(i int) int { return mask.visible(b, i, s.Tk) })
			// out_bh = p · v_bh           [Tq, Dh] written with row stride D
			gemm.Sgemm(false, false, s.Tq, s.Dh, s.Tk, 1, p, s.Tk, vb, s.KVStride, 0, out[b*s.Tq*D+h*s.Dh:], D)
		}
	}
}

// softmaxRows applies a numerically stable softmax to each of the n rows of
// p [n, m] over its first visible(i) entries and zeroes the rest.
func softmaxRows(p []float32, n, m int, visible func(i int) int) {
	ParallelFor(n, 32, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			softmaxRowKernel(p[i*m:i*m+m], visible(i))
		}
	})
}

// AttentionBackward accumulates the gradients of AttentionForward with respect
// to q, k and v (same layouts and strides as the inputs).
//
//	dout: [B, Tq, D]; probs: from the forward pass; scratch: ≥ Tq·Tk floats
//	dq, dk, dv: += (dq may be nil when query gradients are not needed)
func AttentionBackward(dq, dk, dv, dout, probs, q, k, v, scratch []float32, s AttentionShape) {
	D := s.H * s.Dh
	scale := float32(1 / math.Sqrt(float64(s.Dh)))
	dp := scratch[:s.Tq*s.Tk]
	for b := 0; b < s.B; b++ {
		for h := 0; h < s.H; h++ {
			qo := b*s.Tq*s.QStride + h*s.Dh
			ko := b*s.Tk*s.KVStride + h*s.Dh
			do := dout[b*s.Tq*D+h*s.Dh:]
			p := probs[(b*s.H+h)*s.Tq*s.Tk : (b*s.H+h+1)*s.Tq*s.Tk]
			// dp = dout_bh · v_bhᵀ        [Tq, Tk]
			gemm.Sgemm(false, true, s.Tq, s.Tk, s.Dh, 1, do, D, v[ko:], s.KVStride, 0, dp, s.Tk)
			// dv_bh += pᵀ · dout_bh       [Tk, Dh]
			gemm.Sgemm(true, false, s.Tk, s.Dh, s.Tq, 1, p, s.Tk, do, D, 1, dv[ko:], s.KVStride)
			// ds = p ⊙ (dp − Σ_j dp⊙p) · scale  (softmax backward, in place in dp)
			for i := 0; i < s.Tq; i++ {
				pr, dr := p[i*s.Tk:i*s.Tk+s.Tk], dp[i*s.Tk:i*s.Tk+s.Tk]
				var dot float32
				for j := range pr {
					dot += pr[j] * dr[j]
				}
				for j := range pr {
					dr[j] = pr[j] * (dr[j] - dot) * scale
				}
			}
			// dq_bh += ds · k_bh          [Tq, Dh]
			if dq != nil {
				gemm.Sgemm(false, false, s.Tq, s.Dh, s.Tk, 1, dp, s.Tk, k[ko:], s.KVStride, 1, dq[qo:], s.QStride)
			}
			// dk_bh += dsᵀ · q_bh         [Tk, Dh]
			gemm.Sgemm(true, false, s.Tk, s.Dh, s.Tq, 1, dp, s.Tk, q[qo:], s.QStride, 1, dk[ko:], s.KVStride)
		}
	}
}
