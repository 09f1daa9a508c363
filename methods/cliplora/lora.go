// Package cliplora is federated CLIP-LoRA (Zanella & Ben Ayed, "Low-Rank
// Few-Shot Adaptation of Vision-Language Models", 2024, federated as in the
// pFedMMA paper's comparison; specs: baselines.md §6): LoRA on the q, k and v
// projections of every attention block of both encoders (the fused
// in_proj split into its three parts), every client trains all of it and
// the server averages A and B separately (FedAvg, weights n_i).
//
// Decisions:
//   - rank 2, α 1, dropout 0.25 on the LoRA input (training only), A
//     Kaiming-uniform (PyTorch's default for a Linear: bound 1/√fan_in), B
//     zero, as the spec says. The scale is α/√r as the spec writes
//     (rsLoRA's form; standard LoRA uses α/r): `scale: sqrt|linear`.
//   - Aggregation (`aggregate:`): ab (default) averages A and B separately
//     (FedAvg, weights n_i; avg(B)·avg(A) ≠ avg(B·A): the server's model is
//     not the average of the sites' models — the federated baselines'
//     choice). product averages each projection's whole change exactly:
//     a site uploads Δ + s·B·A [D, D] per projection (Δ: the frozen dense
//     change it last installed, zero at first; DeltaName), the server
//     takes their FedAvg, and a site receiving it installs it as its Δ
//     (out += h Δᵀ, no dropout, no gradient) and restarts its LoRA from
//     the common initial factors (A seeded, B zero), so its model is
//     exactly the average and the change accumulates over rounds. Cost: a
//     dense D×D tensor per projection on the wire and in each site's state
//     (≈ 27 M floats for ViT-B/16's 72 projections), one extra GEMM per
//     projection per step; optimizer moments restart with the LoRA when
//     optimizer.reset_each_round is set (the default).
//   - It is the one method that backpropagates through every block of
//     both encoders: the cached prefix is the input of block 1 (patch
//     embeddings after ln_pre; token embeddings plus positions), class
//     prompts run cut after their last EOT, the image tower's last block
//     is pruned to the class token, and the frozen weights get no
//     gradients (only input gradients and the LoRA factors).
package cliplora

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/tensor"
)

// Parts are the projections LoRA adapts, in in_proj order.
var Parts = [3]string{"q", "k", "v"}

// DeltaName is the name of the frozen dense change of one projection
// [D, D] under aggregate: product ("lora.visual.3.q.delta").
func DeltaName(tower string, j int, part string) string {
	return fmt.Sprintf("lora.%s.%d.%s.delta", tower, j, part)
}

// IsDelta reports whether name is a DeltaName.
func IsDelta(name string) bool {
	return strings.HasPrefix(name, "lora.") && strings.HasSuffix(name, ".delta")
}

// Name is the parameter name of a LoRA factor: tower "visual" or "text",
// block j (0-based), part q|k|v, factor "A" [r, D] or "B" [D, r].
func Name(tower string, j int, part, factor string) string {
	return fmt.Sprintf("lora.%s.%d.%s.%s", tower, j, part, factor)
}

// blockLoRA is the LoRA of one block: it implements clip.QKVAdapter on
// parameter and gradient slices owned by a Params set.
type blockLoRA struct {
	D, R    int
	scale   float32
	dropout float64
	rng     *rand.Rand
	A, B    [3][]float32 // [r, D], [D, r]
	dA, dB  [3][]float32
	// delta is the frozen dense change of each projection [D, D] that
	// aggregate: product installs (out += h Δᵀ, no dropout, no gradient);
	// nil under aggregate: ab.
	delta   [3][]float32
	h       [3][]float32 // the dropped-out input of the last train forward [N, D]
	mask    [3][]float32 // its dropout factors: 0 or 1/(1−p) [N, D]; empty without dropout
	in      [3][]float32 // the input Backward reads: h, or the block's ln_1 rows without dropout
	z       [3][]float32 // h · Aᵀ [N, r]
	n       [3]int
	tmp, dz []float32
}

// Forward implements clip.QKVAdapter: out[:, part] += scale · drop(h) Aᵀ Bᵀ
// (+ h Δᵀ under aggregate: product).
//
//	h: [N, D]; A: [r, D]; B: [D, r]; z = drop(h) Aᵀ [N, r]; out rows of width D, stride apart
func (l *blockLoRA) Forward(part int, out []float32, stride int, h []float32, N int, train bool) {
	D, R := l.D, l.R
	in := h[:N*D]
	if d := l.delta[part]; d != nil {
		gemm.Sgemm(false, true, N, D, D, 1, in, D, d, D, 1, out, stride) // out += h Δᵀ
	}
	if train {
		// Backward reads the layer input: the dropped-out copy, or h
		// itself (the block keeps ln_1's output until its backward pass)
		l.mask[part] = l.mask[part][:0]
		if l.dropout > 0 {
			l.h[part] = nn.Grow(l.h[part], N*D)
			l.mask[part] = nn.Grow(l.mask[part], N*D)
			dropoutForward(l.h[part][:N*D], l.mask[part][:N*D], in, l.dropout, l.rng)
			in = l.h[part][:N*D]
		}
		l.in[part] = in
	}
	l.z[part] = nn.Grow(l.z[part], N*R)
	z := l.z[part][:N*R]
	gemm.MatMul(false, true, N, R, D, in, l.A[part], z, false)                    // z = in · Aᵀ       [N, r]
	gemm.Sgemm(false, true, N, D, R, l.scale, z, R, l.B[part], R, 1, out, stride) // out += s · z · Bᵀ
	l.n[part] = N
}

// dropoutForward draws the inverted-dropout mask of probability p —
// mask[i] = 0 with probability p, else 1/(1−p) — and writes
// h = in ⊙ mask. Each 64-bit draw of rng gives two 32-bit uniforms (u < p·2³²
// drops), so p is exact to 2⁻³² (0.25 exactly).
//
//	in, h, mask: [n]
func dropoutForward(h, mask, in []float32, p float64, rng *rand.Rand) {
	keep := float32(1 / (1 - p))
	thr := uint64(math.Ldexp(p, 32))
	n := len(in)
	for i := 0; i < n; i += 2 {
		u := rng.Uint64()
		for j, w := range [2]uint64{u & 0xffffffff, u >> 32} {
			if i+j >= n {
				break
			}
			m := keep
			if w < thr {
				m = 0
			}
			mask[i+j] = m
			h[i+j] = in[i+j] * m
		}
	}
}

// Backward implements clip.QKVAdapter.
//
//	dout rows [N, D] (stride apart); dB += s·doutᵀ z; dz = s·dout B;
//	dA += dzᵀ drop(h); dh += drop'(dz A)
func (l *blockLoRA) Backward(part int, dh, dout []float32, stride, N int) {
	D, R, s := l.D, l.R, l.scale
	if d := l.delta[part]; d != nil {
		gemm.Sgemm(false, false, N, D, D, 1, dout, stride, d, D, 1, dh, D) // dh += dout Δ
	}
	z := l.z[part][:N*R]
	gemm.Sgemm(true, false, D, R, N, s, dout, stride, z, R, 1, l.dB[part], R) // dB += s · doutᵀ z
	l.dz = nn.Grow(l.dz, N*R)
	dz := l.dz[:N*R]
	gemm.Sgemm(false, false, N, R, D, s, dout, stride, l.B[part], R, 0, dz, R) // dz = s · dout · B
	gemm.MatMul(true, false, R, D, N, dz, l.in[part][:N*D], l.dA[part], true)  // dA += dzᵀ · in
	mask := l.mask[part]
	if len(mask) == 0 {
		gemm.MatMul(false, false, N, D, R, dz, l.A[part], dh[:N*D], true) // dh += dz · A
		return
	}
	// dh += (dz · A) ⊙ mask (the dropout's zeros and 1/(1−p))
	l.tmp = nn.Grow(l.tmp, N*D)
	dhin := l.tmp[:N*D]
	gemm.MatMul(false, false, N, D, R, dz, l.A[part], dhin, false)
	for i, m := range mask[:N*D] {
		dh[i] += dhin[i] * m
	}
}

// tower is one encoder's LoRA extent.
type tower struct {
	name          string
	layers, width int
}

// initParams draws A Kaiming-uniform (bound 1/√D) and sets B to zero.
// towers lists each encoder's name, layers and width, in draw order.
func initParams(p tensor.Named, towers []tower, r int, rng *rand.Rand) {
	for _, tw := range towers {
		tower, L, D := tw.name, tw.layers, tw.width
		bound := 1 / math.Sqrt(float64(D))
		for j := 0; j < L; j++ {
			for _, part := range Parts {
				a := tensor.New(r, D)
				for i := range a.Data {
					a.Data[i] = float32((2*rng.Float64() - 1) * bound)
				}
				p[Name(tower, j, part, "A")] = a
				p[Name(tower, j, part, "B")] = tensor.New(D, r)
			}
		}
	}
}
