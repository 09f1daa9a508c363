package prompt

import (
	"math"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/nn"
)

// sharedPrefix runs the rows of an Encoder with the prefix that a group's
// rows have in common computed once.
//
// Every row of a context group starts with the same P = 1 + n_ctx tokens
// (the SOT and the group's context). Under the causal mask the hidden states
// at those positions depend only on those tokens, so they are equal in all
// rows of the group at every layer. The packed layout holds each group's
// prefix once, followed by each row's own suffix (positions P..EOT):
//
//	packed rows: [group 0 prefix (P)] … [group G−1 prefix (P)]
//	             [row 0 suffix (S_0)] … [row R−1 suffix (S_{R−1})]
//
// LayerNorms, projections and MLPs are row-wise and run on the packed rows
// as they are; attention lets a suffix row attend to its group's prefix
// rows and to its own row's earlier suffix rows, a prefix row to the earlier
// rows of its prefix. With 24 classes, n_ctx 16 and short class names this
// is about 4× fewer rows than R·T. The gradient a prefix row receives is
// already the sum over the group's rows, which is the context gradient.
type sharedPrefix struct {
	G, P, N, T int   // groups, prefix length, packed rows, longest key list
	sOff, sLen []int // [R] first packed row and length of each row's suffix
	eotRow     []int // [R] packed row of each row's EOT
	// key ranges of each packed row: rows [k1, k1+n1) then [k2, k2+n2)
	k1, n1, k2, n2 []int

	acts                    []packedActs // per block
	dy, dx, dx2, datt, dln1 []float32    // [N, D]
	dln2                    []float32
	dqkv                    []float32 // [N, 3D]
	dgelu, dfc              []float32 // [N, MLP]
	dsc                     []float32 // [H, T] attention backward scratch
	pooled                  []float32 // [R, D]
}

// packedActs are one block's activations on the packed rows.
type packedActs struct {
	x                      []float32 // input [N, D] (by reference)
	ln1, mean1, rstd1      []float32
	qkv                    []float32 // [N, 3D]
	probs                  []float32 // [N, H, T]
	att, x2, ln2, out      []float32 // [N, D]
	mean2, rstd2, fc, gelu []float32
}

// newSharedPrefix plans the packed layout of R rows with EOT positions eot
// in G groups with prefix length P.
func newSharedPrefix(eot []int, G, P int) *sharedPrefix {
	R := len(eot)
	per := R / G
	s := &sharedPrefix{G: G, P: P, sOff: make([]int, R), sLen: make([]int, R), eotRow: make([]int, R)}
	n := G * P
	for r, e := range eot {
		s.sOff[r], s.sLen[r] = n, e+1-P
		n += s.sLen[r]
		s.eotRow[r] = n - 1
		s.T = max(s.T, e+1)
	}
	s.N = n
	s.k1, s.n1, s.k2, s.n2 = make([]int, n), make([]int, n), make([]int, n), make([]int, n)
	for g := 0; g < G; g++ {
		for i := 0; i < P; i++ {
			s.k1[g*P+i], s.n1[g*P+i] = g*P, i+1
		}
	}
	for r := 0; r < R; r++ {
		for j := 0; j < s.sLen[r]; j++ {
			q := s.sOff[r] + j
			s.k1[q], s.n1[q], s.k2[q], s.n2[q] = (r/per)*P, P, s.sOff[r], j+1
		}
	}
	return s
}

// pack writes the first block's input [N, D] from base [R, T, D] and the
// context ctx [G, n, D] (the prefix from the group's first row).
func (s *sharedPrefix) pack(x0, base, ctx []float32, R, T, D int) {
	P, per, n := s.P, R/s.G, s.P-1
	for g := 0; g < s.G; g++ {
		r0 := g * per
		copy(x0[g*P*D:(g*P+1)*D], base[r0*T*D:(r0*T+1)*D])
		c := ctx[g*n*D : (g+1)*n*D]
		x := x0[(g*P+1)*D : (g+1)*P*D]
		b := base[(r0*T+1)*D : (r0*T+P)*D]
		for i, v := range c {
			x[i] = v + b[i]
		}
	}
	for r := 0; r < R; r++ {
		copy(x0[s.sOff[r]*D:(s.sOff[r]+s.sLen[r])*D], base[(r*T+P)*D:(r*T+P+s.sLen[r])*D])
	}
}

// forward runs the blocks on x0 [N, D] and returns the EOT rows [R, D].
func (s *sharedPrefix) forward(blocks []*clip.Block, x0 []float32, R int) []float32 {
	if len(s.acts) < len(blocks) {
		s.acts = make([]packedActs, len(blocks))
	}
	x := x0
	for i, b := range blocks {
		s.blockForward(b, &s.acts[i], x)
		x = s.acts[i].out
	}
	D := blocks[0].D
	s.pooled = nn.Grow(s.pooled, R*D)
	for r, q := range s.eotRow {
		copy(s.pooled[r*D:(r+1)*D], x[q*D:(q+1)*D])
	}
	return s.pooled
}

// backward takes the gradient at the EOT rows dpool [R, D] and returns the
// gradient at the packed input [N, D] (owned by s).
func (s *sharedPrefix) backward(blocks []*clip.Block, dpool []float32) []float32 {
	D := blocks[0].D
	s.dy = nn.Grow(s.dy, s.N*D)
	clear(s.dy)
	for r, q := range s.eotRow {
		copy(s.dy[q*D:(q+1)*D], dpool[r*D:(r+1)*D])
	}
	for i := len(blocks) - 1; i >= 0; i-- {
		s.blockBackward(blocks[i], &s.acts[i])
		s.dy, s.dx = s.dx, s.dy
	}
	return s.dy
}

// blockForward is clip.Block's forward pass on the packed rows:
//
//	x' = x + out_proj(attn(ln_1(x)));  y = x' + c_proj(QuickGELU(c_fc(ln_2(x'))))
func (s *sharedPrefix) blockForward(b *clip.Block, a *packedActs, x []float32) {
	N, D, MLP, w := s.N, b.D, b.MLP, b.W
	g := nn.Grow
	a.x = x
	a.ln1, a.mean1, a.rstd1 = g(a.ln1, N*D), g(a.mean1, N), g(a.rstd1, N)
	a.qkv, a.probs = g(a.qkv, N*3*D), g(a.probs, N*b.H*s.T)
	a.att, a.x2, a.ln2, a.out = g(a.att, N*D), g(a.x2, N*D), g(a.ln2, N*D), g(a.out, N*D)
	a.mean2, a.rstd2 = g(a.mean2, N), g(a.rstd2, N)
	a.fc, a.gelu = g(a.fc, N*MLP), g(a.gelu, N*MLP)

	nn.LayerNormForward(a.ln1, a.mean1, a.rstd1, x, w.Ln1W, w.Ln1B, N, D)
	b.FrozenLinear(clip.InProj, a.qkv, a.ln1, N)
	s.attnForward(a.att, a.probs, a.qkv, b.H, D/b.H)
	b.FrozenLinear(clip.OutProj, a.x2, a.att, N)
	for i, v := range x[:N*D] {
		a.x2[i] += v
	}
	nn.LayerNormForward(a.ln2, a.mean2, a.rstd2, a.x2, w.Ln2W, w.Ln2B, N, D)
	b.FrozenLinear(clip.Fc, a.fc, a.ln2, N)
	nn.QuickGELUForward(a.gelu, a.fc, N*MLP)
	b.FrozenLinear(clip.Proj, a.out, a.gelu, N)
	for i, v := range a.x2 {
		a.out[i] += v
	}
}

// blockBackward takes s.dy (gradient at the block output) and writes the
// gradient at the block input into s.dx (input gradients only).
func (s *sharedPrefix) blockBackward(b *clip.Block, a *packedActs) {
	N, D, MLP, w := s.N, b.D, b.MLP, b.W
	g := nn.Grow
	s.dx2, s.dgelu, s.dfc = g(s.dx2, N*D), g(s.dgelu, N*MLP), g(s.dfc, N*MLP)
	s.dln2, s.datt, s.dqkv, s.dln1 = g(s.dln2, N*D), g(s.datt, N*D), g(s.dqkv, N*3*D), g(s.dln1, N*D)
	s.dx = g(s.dx, N*D)
	for _, buf := range [][]float32{s.dgelu, s.dfc, s.dln2, s.datt, s.dqkv, s.dln1} {
		clear(buf)
	}
	copy(s.dx2, s.dy)
	b.FrozenLinearInputGrad(clip.Proj, s.dgelu, s.dy, N)
	nn.QuickGELUBackward(s.dfc, s.dgelu, a.fc, N*MLP)
	b.FrozenLinearInputGrad(clip.Fc, s.dln2, s.dfc, N)
	nn.LayerNormBackward(s.dx2, nil, nil, s.dln2, a.x2, a.mean2, a.rstd2, w.Ln2W, N, D)
	b.FrozenLinearInputGrad(clip.OutProj, s.datt, s.dx2, N)
	s.attnBackward(s.dqkv, s.datt, a.probs, a.qkv, b.H, D/b.H)
	b.FrozenLinearInputGrad(clip.InProj, s.dln1, s.dqkv, N)
	copy(s.dx, s.dx2)
	nn.LayerNormBackward(s.dx, nil, nil, s.dln1, a.x, a.mean1, a.rstd1, w.Ln1W, N, D)
}

// keys calls f(k, idx) for every key row k of packed query row q, idx
// counting from 0.
func (s *sharedPrefix) keys(q int, f func(k, idx int)) {
	idx := 0
	for k := s.k1[q]; k < s.k1[q]+s.n1[q]; k++ {
		f(k, idx)
		idx++
	}
	for k := s.k2[q]; k < s.k2[q]+s.n2[q]; k++ {
		f(k, idx)
		idx++
	}
}

// attnForward: for each packed query row q and head h,
//
//	p = softmax(q·kᵀ/√Dh) over q's keys;  att[q, h] = Σ p_k v_k
//
// qkv [N, 3D] holds q|k|v per row; probs [N, H, T] keeps p.
func (s *sharedPrefix) attnForward(att, probs, qkv []float32, H, Dh int) {
	D, T := H*Dh, s.T
	scale := 1 / math.Sqrt(float64(Dh))
	nn.ParallelFor(s.N, 4, func(lo, hi int) {
		for q := lo; q < hi; q++ {
			for h := 0; h < H; h++ {
				p := probs[(q*H+h)*T : (q*H+h+1)*T]
				qv := qkv[q*3*D+h*Dh : q*3*D+h*Dh+Dh]
				mx := float32(math.Inf(-1))
				s.keys(q, func(k, i int) {
					kv := qkv[k*3*D+D+h*Dh : k*3*D+D+h*Dh+Dh]
					var dot float32
					for d, v := range qv {
						dot += v * kv[d]
					}
					p[i] = dot * float32(scale)
					mx = max(mx, p[i])
				})
				nk := s.n1[q] + s.n2[q]
				var sum float32
				for i := range p[:nk] {
					p[i] = float32(math.Exp(float64(p[i] - mx)))
					sum += p[i]
				}
				clear(p[nk:])
				o := att[q*D+h*Dh : q*D+h*Dh+Dh]
				clear(o)
				s.keys(q, func(k, i int) {
					p[i] /= sum
					vv := qkv[k*3*D+2*D+h*Dh : k*3*D+2*D+h*Dh+Dh]
					for d, v := range vv {
						o[d] += p[i] * v
					}
				})
			}
		}
	})
}

// attnBackward accumulates dqkv [N, 3D] from datt [N, D]:
//
//	dv_k += p_k·do;  ds_k = p_k·(do·v_k − Σ_j p_j do·v_j)
//	dq += ds_k·k_k/√Dh;  dk_k += ds_k·q/√Dh
//
// Heads write disjoint columns, so they run in parallel.
func (s *sharedPrefix) attnBackward(dqkv, datt, probs, qkv []float32, H, Dh int) {
	D, T := H*Dh, s.T
	scale := float32(1 / math.Sqrt(float64(Dh)))
	s.dsc = nn.Grow(s.dsc, H*T)
	nn.ParallelFor(H, 1, func(lo, hi int) {
		for h := lo; h < hi; h++ {
			dp := s.dsc[h*T : (h+1)*T]
			for q := 0; q < s.N; q++ {
				p := probs[(q*H+h)*T : (q*H+h+1)*T]
				do := datt[q*D+h*Dh : q*D+h*Dh+Dh]
				var pdp float32
				s.keys(q, func(k, i int) {
					vv := qkv[k*3*D+2*D+h*Dh : k*3*D+2*D+h*Dh+Dh]
					dv := dqkv[k*3*D+2*D+h*Dh : k*3*D+2*D+h*Dh+Dh]
					var dot float32
					for d, v := range vv {
						dot += do[d] * v
						dv[d] += p[i] * do[d]
					}
					dp[i] = dot
					pdp += p[i] * dot
				})
				qv := qkv[q*3*D+h*Dh : q*3*D+h*Dh+Dh]
				dq := dqkv[q*3*D+h*Dh : q*3*D+h*Dh+Dh]
				s.keys(q, func(k, i int) {
					ds := p[i] * (dp[i] - pdp) * scale
					kv := qkv[k*3*D+D+h*Dh : k*3*D+D+h*Dh+Dh]
					dk := dqkv[k*3*D+D+h*Dh : k*3*D+D+h*Dh+Dh]
					for d := range dq {
						dq[d] += ds * kv[d]
						dk[d] += ds * qv[d]
					}
				})
			}
		}
	})
}
