package adapt

import (
	"math"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/nn"
)

// The layers of ADAPT's head, one forward and one backward function each
// (llm.c style): shapes in comments, backward passes accumulate (+=).

// scoresForward computes the domain scores of the parameter-free weighting
//
//	a[b, i] = ⟨q̂_b, k̂_{b,i}⟩ / τ                     [B, n]
//
// for queries q [B, D] and keys k [B, n, D], with q̂, k̂ the L2-normalised
// vectors (written to qn [B, D], kn [B, n, D]; their norms to qnorm [B],
// knorm [B·n]).
func scoresForward(a, qn, kn, qnorm, knorm, q, k []float32, B, n, D int, tau float32) {
	copy(qn, q[:B*D])
	copy(kn, k[:B*n*D])
	clip.NormalizeRows(qnorm, qn, B, D)
	clip.NormalizeRows(knorm, kn, B*n, D)
	for b := 0; b < B; b++ {
		qb := qn[b*D : (b+1)*D]
		for i := 0; i < n; i++ {
			a[b*n+i] = dot(qb, kn[(b*n+i)*D:(b*n+i+1)*D]) / tau
		}
	}
}

// scoresBackward takes da [B, n] and accumulates dq [B, D] and dk [B, n, D]
// (either may be nil).
func scoresBackward(dq, dk, da, qn, kn, qnorm, knorm []float32, B, n, D int, tau float32, tmp []float32) []float32 {
	tmp = nn.Grow(tmp, 2*D)
	dn, dx := tmp[:D], tmp[D:2*D]
	for b := 0; b < B; b++ {
		qb := qn[b*D : (b+1)*D]
		// dq̂ = Σ_i da_i k̂_i / τ
		clear(dn)
		for i := 0; i < n; i++ {
			g := da[b*n+i] / tau
			for j, v := range kn[(b*n+i)*D : (b*n+i+1)*D] {
				dn[j] += g * v
			}
		}
		if dq != nil {
			clip.NormBackward(dx, dn, qb, qnorm[b:b+1], 1, D)
			for j, v := range dx {
				dq[b*D+j] += v
			}
		}
		if dk == nil {
			continue
		}
		for i := 0; i < n; i++ {
			// dk̂_i = da_i q̂ / τ
			g := da[b*n+i] / tau
			for j, v := range qb {
				dn[j] = g * v
			}
			r := b*n + i
			clip.NormBackward(dx, dn, kn[r*D:(r+1)*D], knorm[r:r+1], 1, D)
			for j, v := range dx {
				dk[r*D+j] += v
			}
		}
	}
	return tmp
}

// softmaxForward writes w = softmax(a) over the rows of a [B, n].
func softmaxForward(w, a []float32, B, n int) {
	for b := 0; b < B; b++ {
		row, out := a[b*n:(b+1)*n], w[b*n:(b+1)*n]
		mx := row[0]
		for _, v := range row {
			mx = max(mx, v)
		}
		var s float64
		for i, v := range row {
			e := math.Exp(float64(v - mx))
			out[i] = float32(e)
			s += e
		}
		for i := range out {
			out[i] = float32(float64(out[i]) / s)
		}
	}
}

// softmaxBackward accumulates da += w ⊙ (dw − ⟨w, dw⟩) for rows [B, n].
func softmaxBackward(da, dw, w []float32, B, n int) {
	for b := 0; b < B; b++ {
		wr, gr := w[b*n:(b+1)*n], dw[b*n:(b+1)*n]
		s := dot(wr, gr)
		for i := range wr {
			da[b*n+i] += wr[i] * (gr[i] - s)
		}
	}
}

// mixForward mixes the domains' text features with each image's weights:
//
//	m[b, c] = Σ_i w[b, i] · u[i, c]       w [B, n], u [n, C, E] → m [B, C, E]
func mixForward(m, w, u []float32, B, n, C, E int) {
	clear(m[:B*C*E])
	for b := 0; b < B; b++ {
		mb := m[b*C*E : (b+1)*C*E]
		for i := 0; i < n; i++ {
			g := w[b*n+i]
			for j, v := range u[i*C*E : (i+1)*C*E] {
				mb[j] += g * v
			}
		}
	}
}

// mixBackward accumulates dw [B, n] and du [n, C, E] (either may be nil)
// from dm [B, C, E].
func mixBackward(dw, du, dm, w, u []float32, B, n, C, E int) {
	for b := 0; b < B; b++ {
		dmb := dm[b*C*E : (b+1)*C*E]
		for i := 0; i < n; i++ {
			ui := u[i*C*E : (i+1)*C*E]
			if dw != nil {
				dw[b*n+i] += dot(dmb, ui)
			}
			if du != nil {
				g := w[b*n+i]
				d := du[i*C*E : (i+1)*C*E]
				for j, v := range dmb {
					d[j] += g * v
				}
			}
		}
	}
}

// adaLN is the optional conditioning of the (mixed) text features on the
// image features, L DiT-style layers added residually:
//
//	[γ_b | β_b] = W_l · v̂_b + b_l                    v̂ [B, E], W_l [2E, E], b_l [2E]
//	h_l[b, c]   = h_{l−1}[b, c] + LN(h_{l−1}[b, c]) ⊙ γ_b + β_b
//
// with LN a LayerNorm without affine parameters. W_l and b_l start at zero
// (the identity map). It keeps the activations of the last forward pass.
type adaLN struct {
	L, B, C, E int
	cond       []float32   // v̂ [B, E] (by reference)
	gb         [][]float32 // [L][B, 2E]
	in         [][]float32 // [L][B·C, E] layer inputs
	ln         [][]float32 // [L][B·C, E]
	mean, rstd [][]float32 // [L][B·C]
	out        []float32   // [B·C, E]
	ones, zero []float32   // LN without affine
	dh, dln    []float32
	dgb        []float32
}

// forward runs the layers on h [B, C, E] conditioned on cond [B, E] with
// weights W[l] [2E, E], bias[l] [2E]; it returns the output (owned by a).
func (a *adaLN) forward(h, cond []float32, W, bias [][]float32, B, C, E int) []float32 {
	L := len(W)
	a.L, a.B, a.C, a.E, a.cond = L, B, C, E, cond
	N := B * C
	for len(a.gb) < L {
		a.gb, a.in, a.ln = append(a.gb, nil), append(a.in, nil), append(a.ln, nil)
		a.mean, a.rstd = append(a.mean, nil), append(a.rstd, nil)
	}
	if len(a.ones) != E {
		a.ones, a.zero = make([]float32, E), make([]float32, E)
		for i := range a.ones {
			a.ones[i] = 1
		}
	}
	x := h
	for l := 0; l < L; l++ {
		a.in[l] = nn.Grow(a.in[l], N*E)
		copy(a.in[l], x[:N*E])
		a.gb[l] = nn.Grow(a.gb[l], B*2*E)
		nn.LinearForward(a.gb[l], cond, W[l], bias[l], B, E, 2*E)
		a.ln[l], a.mean[l], a.rstd[l] = nn.Grow(a.ln[l], N*E), nn.Grow(a.mean[l], N), nn.Grow(a.rstd[l], N)
		nn.LayerNormForward(a.ln[l], a.mean[l], a.rstd[l], a.in[l], a.ones, a.zero, N, E)
		a.out = nn.Grow(a.out, N*E)
		for b := 0; b < B; b++ {
			g, be := a.gb[l][b*2*E:b*2*E+E], a.gb[l][b*2*E+E:(b+1)*2*E]
			for c := 0; c < C; c++ {
				r := (b*C + c) * E
				o, xi, li := a.out[r:r+E], a.in[l][r:r+E], a.ln[l][r:r+E]
				for j := range o {
					o[j] = xi[j] + li[j]*g[j] + be[j]
				}
			}
		}
		x = a.out
	}
	return x
}

// backward takes dout [B, C, E] and accumulates dh [B, C, E], dcond [B, E]
// (may be nil), dW[l] and dbias[l].
func (a *adaLN) backward(dh, dcond, dout []float32, W, dW, dbias [][]float32) {
	B, C, E := a.B, a.C, a.E
	N := B * C
	a.dh = nn.Grow(a.dh, N*E)
	copy(a.dh, dout[:N*E])
	a.dln = nn.Grow(a.dln, N*E)
	a.dgb = nn.Grow(a.dgb, B*2*E)
	for l := a.L - 1; l >= 0; l-- {
		// residual: dh_{l−1} = dh_l + LN-backward(dh_l ⊙ γ)
		clear(a.dgb)
		for b := 0; b < B; b++ {
			g := a.gb[l][b*2*E : b*2*E+E]
			dg, dbe := a.dgb[b*2*E:b*2*E+E], a.dgb[b*2*E+E:(b+1)*2*E]
			for c := 0; c < C; c++ {
				r := (b*C + c) * E
				d, li, dl := a.dh[r:r+E], a.ln[l][r:r+E], a.dln[r:r+E]
				for j := range d {
					dl[j] = d[j] * g[j]
					dg[j] += d[j] * li[j]
					dbe[j] += d[j]
				}
			}
		}
		nn.LayerNormBackward(a.dh, nil, nil, a.dln, a.in[l], a.mean[l], a.rstd[l], a.ones, N, E)
		nn.LinearBackward(dcond, dW[l], dbias[l], a.dgb, a.cond, W[l], B, E, 2*E)
	}
	for i, v := range a.dh {
		dh[i] += v
	}
}

// cosineForward is CLIP's classifier with per-image class features:
//
//	logits[b, c] = s · ⟨v̂_b, t̂_{b,c}⟩           v [B, E], t [B, C, E]
//
// keeping the normalised copies vn, tn and the norms.
func cosineForward(logits, vn, tn, vnorm, tnorm, v, t []float32, B, C, E int, s float32) {
	copy(vn, v[:B*E])
	copy(tn, t[:B*C*E])
	clip.NormalizeRows(vnorm, vn, B, E)
	clip.NormalizeRows(tnorm, tn, B*C, E)
	for b := 0; b < B; b++ {
		vb := vn[b*E : (b+1)*E]
		for c := 0; c < C; c++ {
			logits[b*C+c] = s * dot(vb, tn[(b*C+c)*E:(b*C+c+1)*E])
		}
	}
}

// cosineBackward accumulates dv [B, E] and dt [B, C, E] from dlogits
// [B, C].
func cosineBackward(dv, dt, dlogits, vn, tn, vnorm, tnorm []float32, B, C, E int, s float32, tmp []float32) []float32 {
	tmp = nn.Grow(tmp, 2*E)
	dn, dx := tmp[:E], tmp[E:2*E]
	for b := 0; b < B; b++ {
		vb := vn[b*E : (b+1)*E]
		clear(dn)
		for c := 0; c < C; c++ {
			g := s * dlogits[b*C+c]
			r := b*C + c
			for j, x := range tn[r*E : (r+1)*E] {
				dn[j] += g * x
			}
		}
		clip.NormBackward(dx, dn, vb, vnorm[b:b+1], 1, E)
		for j, x := range dx {
			dv[b*E+j] += x
		}
		for c := 0; c < C; c++ {
			g := s * dlogits[b*C+c]
			r := b*C + c
			for j, x := range vb {
				dn[j] = g * x
			}
			clip.NormBackward(dx, dn, tn[r*E:(r+1)*E], tnorm[r:r+1], 1, E)
			for j, x := range dx {
				dt[r*E+j] += x
			}
		}
	}
	return tmp
}

func dot(a, b []float32) float32 {
	var s float32
	for i, v := range a {
		s += v * b[i]
	}
	return s
}
