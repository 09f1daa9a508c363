package fedpha

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
)

// Projection is FedPHA's projector as the reference code computes it
// (PMFLT's compute_null_space): the reduced SVD of the global prompt
// A = U S Vᵀ [n, D] (k = min(n, D) singular values, descending), cutoff =
// int(k·(1 − ratio)), and
//
//	P = V₂ V₂ᵀ,  V₂ = V[:, cutoff:]                                    [D, D]
//
// the projector onto the k − cutoff smallest right singular directions
// inside the row space of A (not its orthogonal complement, whatever the
// paper calls it). Backward is the exact derivative of P with respect to A
// (the singular values of A must be distinct and non-zero). Everything is
// computed in float64.
type Projection struct {
	Ratio float64

	n, D, k, cutoff int
	u, v            *mat.Dense // [n, k], [D, k]
	s               []float64  // [k]
	p               []float32  // [D, D]
	gs, w           []float64  // backward scratch
}

// Cutoff is int(k·(1 − ratio)) as Python's int() of the float product.
func Cutoff(k int, ratio float64) int { return int(float64(k) * (1 - ratio)) }

// Forward factorises A [n, D] (row-major) and returns P [D, D] (owned by
// the projection, valid until the next Forward).
func (p *Projection) Forward(a []float32, n, D int) ([]float32, error) {
	if len(a) != n*D || n < 1 || D < 1 {
		return nil, fmt.Errorf("fedpha: projection of %d values as [%d, %d]", len(a), n, D)
	}
	p.n, p.D, p.k = n, D, min(n, D)
	p.cutoff = Cutoff(p.k, p.Ratio)
	if p.cutoff < 0 || p.cutoff > p.k {
		return nil, fmt.Errorf("fedpha: ratio %g gives cutoff %d outside 0..%d", p.Ratio, p.cutoff, p.k)
	}
	ad := mat.NewDense(n, D, nil)
	for i := 0; i < n; i++ {
		for j := 0; j < D; j++ {
			ad.Set(i, j, float64(a[i*D+j]))
		}
	}
	var svd mat.SVD
	if !svd.Factorize(ad, mat.SVDThin) {
		return nil, fmt.Errorf("fedpha: the SVD of the global prompt [%d, %d] did not converge", n, D)
	}
	if len(p.s) != p.k {
		p.s = make([]float64, p.k)
	}
	svd.Values(p.s)
	p.u, p.v = &mat.Dense{}, &mat.Dense{}
	svd.UTo(p.u)
	svd.VTo(p.v)
	if len(p.p) != D*D {
		p.p = make([]float32, D*D)
	}
	vr := p.v.RawMatrix()
	for r := 0; r < D; r++ {
		for c := r; c < D; c++ {
			var x float64
			for i := p.cutoff; i < p.k; i++ {
				x += vr.Data[r*vr.Stride+i] * vr.Data[c*vr.Stride+i]
			}
			p.p[r*D+c], p.p[c*D+r] = float32(x), float32(x)
		}
	}
	return p.p, nil
}

// SingularValues returns the k singular values of the last Forward,
// descending (owned by the projection).
func (p *Projection) SingularValues() []float64 { return p.s }

// Backward takes dP [D, D], the gradient of the loss with respect to the
// P of the last Forward, and adds the gradient with respect to A into da
// [n, D]. With Gs = (dP + dPᵀ)/2, N = I − V Vᵀ (the complement of A's row
// space), "bot" the kept directions i ≥ cutoff and "top" the others:
//
//	dA += Σ_{i∈bot} (2/s_i) u_i (N Gs v_i)ᵀ
//	    + Σ_{i∈bot, j∈top} 2 (v_jᵀ Gs v_i) / (s_i² − s_j²) · (s_i u_i v_jᵀ + s_j u_j v_iᵀ)
//
// (the first term moves the row space, the second rotates the kept
// directions against the dropped ones; rotations within either set leave P
// unchanged).
func (p *Projection) Backward(da []float32, dP []float32) error {
	n, D, k := p.n, p.D, p.k
	if len(da) != n*D || len(dP) != D*D {
		return fmt.Errorf("fedpha: projection backward: %d and %d values, want %d and %d", len(da), len(dP), n*D, D*D)
	}
	for i := p.cutoff; i < k; i++ {
		if !(p.s[i] > 0) {
			return fmt.Errorf("fedpha: the global prompt is rank-deficient (singular value %d is %g): the projection has no derivative", i, p.s[i])
		}
		for j := 0; j < p.cutoff; j++ {
			if p.s[j] == p.s[i] {
				return fmt.Errorf("fedpha: singular values %d and %d of the global prompt are equal (%g): the projection has no derivative", j, i, p.s[i])
			}
		}
	}
	if len(p.gs) != D*D {
		p.gs = make([]float64, D*D)
	}
	for r := 0; r < D; r++ {
		for c := 0; c < D; c++ {
			p.gs[r*D+c] = (float64(dP[r*D+c]) + float64(dP[c*D+r])) / 2
		}
	}
	gs := mat.NewDense(D, D, p.gs)
	// GV = Gs V [D, k]; VtGV = Vᵀ Gs V [k, k]
	var gv, vtgv mat.Dense
	gv.Mul(gs, p.v)
	vtgv.Mul(p.v.T(), &gv)
	// N Gs v_i = Gs v_i − V (Vᵀ Gs v_i)
	var vvgv mat.Dense
	vvgv.Mul(p.v, &vtgv)
	if len(p.w) != n*D {
		p.w = make([]float64, n*D)
	}
	clear(p.w)
	dA := mat.NewDense(n, D, p.w)
	u := p.u
	for i := p.cutoff; i < k; i++ {
		c := 2 / p.s[i]
		for r := 0; r < n; r++ {
			ur := c * u.At(r, i)
			if ur == 0 {
				continue
			}
			for d := 0; d < D; d++ {
				dA.Set(r, d, dA.At(r, d)+ur*(gv.At(d, i)-vvgv.At(d, i)))
			}
		}
		for j := 0; j < p.cutoff; j++ {
			g := 2 * vtgv.At(j, i) / (p.s[i]*p.s[i] - p.s[j]*p.s[j])
			a, b := g*p.s[i], g*p.s[j]
			for r := 0; r < n; r++ {
				ui, uj := a*u.At(r, i), b*u.At(r, j)
				for d := 0; d < D; d++ {
					dA.Set(r, d, dA.At(r, d)+ui*p.v.At(d, j)+uj*p.v.At(d, i))
				}
			}
		}
	}
	for i, x := range p.w {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Errorf("fedpha: projection backward: non-finite gradient")
		}
		da[i] += float32(x)
	}
	return nil
}
