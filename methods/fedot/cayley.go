package fedot

import (
	"fmt"

	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/nn"
)

// Cayley is the block-diagonal orthogonal transform of FedOT(+B):
//
//	W = diag(Q_1 … Q_r),  Q_j = (I + R_j)(I − R_j)⁻¹ = 2(I − R_j)⁻¹ − I,
//	R_j = ½(X_j − X_jᵀ)
//
// of the unconstrained parameter X [r, s, s] (d = r·s; r = 1 is FedOT).
// Since I + R = 2I − (I − R), the Cayley transform needs only M = (I − R)⁻¹,
// and h' = W h = 2·M h − h. Factor computes an LU factorisation of each
// I − R_j once per step (float64); Forward solves against the batch, and
// Backward against the upstream gradient: with u_b = M h_b and
// v_b = Mᵀ dh'_b, dL/dR = 2 Mᵀ dW Mᵀ = 2 Σ_b v_b u_bᵀ and
// dL/dX = ½(dL/dR − dL/dRᵀ) = Σ_b (v_b u_bᵀ − u_b v_bᵀ): no d×d inverse is
// formed.
type Cayley struct {
	R, S int // blocks and block size
	lu   []LU
	a    []float64 // I − R_j, column-major scratch [s, s]
	B    int
	u    []float64 // M_j h, [r][B][s] (column-major s×B per block)
	v    []float64 // scratch [B][s]
	uf   []float32 // float32 copies for the gradient GEMMs, [B][s]
	vf   []float32
}

// NewCayley returns the transform of d-dimensional features in r blocks.
func NewCayley(d, r int) (*Cayley, error) {
	if r < 1 || d%r != 0 {
		return nil, fmt.Errorf("fedot: %d blocks do not divide the feature dimension %d", r, d)
	}
	return &Cayley{R: r, S: d / r, lu: make([]LU, r)}, nil
}

// Factor factors I − R_j of every block of x [r, s, s] (row-major blocks).
func (c *Cayley) Factor(x []float32) error {
	s := c.S
	c.a = growF64(c.a, s*s)
	for j := 0; j < c.R; j++ {
		xj := x[j*s*s : (j+1)*s*s]
		// column-major: a[p + q·s] = (I − R)_pq = δ_pq − ½(X_pq − X_qp)
		for q := 0; q < s; q++ {
			for p := 0; p < s; p++ {
				v := -0.5 * (float64(xj[p*s+q]) - float64(xj[q*s+p]))
				if p == q {
					v++
				}
				c.a[p+q*s] = v
			}
		}
		if err := c.lu[j].Factor(c.a, s); err != nil {
			return fmt.Errorf("fedot: block %d: %w", j, err)
		}
	}
	return nil
}

// Forward writes out [B, d] = h W ᵀ (h' = W h per row) for h [B, d], using
// the last Factor, and keeps M h for Backward.
func (c *Cayley) Forward(out, h []float32, B int) error {
	s, d := c.S, c.R*c.S
	c.B = B
	c.u = growF64(c.u, c.R*B*s)
	for j := 0; j < c.R; j++ {
		u := c.u[j*B*s : (j+1)*B*s]
		for b := 0; b < B; b++ {
			for k := 0; k < s; k++ {
				u[b*s+k] = float64(h[b*d+j*s+k])
			}
		}
		if err := c.lu[j].Solve(false, u, B, s); err != nil {
			return err
		}
		for b := 0; b < B; b++ {
			for k := 0; k < s; k++ {
				i := b*d + j*s + k
				out[i] = float32(2*u[b*s+k] - float64(h[i]))
			}
		}
	}
	return nil
}

// Backward accumulates into dx [r, s, s] the gradient of the last Forward
// given dout [B, d].
func (c *Cayley) Backward(dx, dout []float32) error {
	s, d, B := c.S, c.R*c.S, c.B
	c.v = growF64(c.v, B*s)
	c.uf, c.vf = nn.Grow(c.uf, B*s), nn.Grow(c.vf, B*s)
	for j := 0; j < c.R; j++ {
		u := c.u[j*B*s : (j+1)*B*s]
		for b := 0; b < B; b++ {
			for k := 0; k < s; k++ {
				c.v[b*s+k] = float64(dout[b*d+j*s+k])
			}
		}
		if err := c.lu[j].Solve(true, c.v, B, s); err != nil {
			return err
		}
		for i := 0; i < B*s; i++ {
			c.uf[i], c.vf[i] = float32(u[i]), float32(c.v[i])
		}
		// dX_j += Vᵀ U − Uᵀ V  (V, U: [B, s])
		dxj := dx[j*s*s : (j+1)*s*s]
		gemm.Sgemm(true, false, s, s, B, 1, c.vf, s, c.uf, s, 1, dxj, s)
		gemm.Sgemm(true, false, s, s, B, -1, c.uf, s, c.vf, s, 1, dxj, s)
	}
	return nil
}

// Matrix writes the block-diagonal W [d, d] (row-major) of the last Factor.
func (c *Cayley) Matrix(w []float32) error {
	s, d := c.S, c.R*c.S
	clear(w[:d*d])
	m := make([]float64, s*s)
	for j := 0; j < c.R; j++ {
		clear(m)
		for k := 0; k < s; k++ {
			m[k+k*s] = 1
		}
		if err := c.lu[j].Solve(false, m, s, s); err != nil {
			return err
		}
		// m column-major: M_pq = m[p + q·s]; W = 2M − I.
		for p := 0; p < s; p++ {
			for q := 0; q < s; q++ {
				v := 2 * m[p+q*s]
				if p == q {
					v--
				}
				w[(j*s+p)*d+j*s+q] = float32(v)
			}
		}
	}
	return nil
}

// IdentityX fills x [r, s, s] with the paper's initial value X = I (so
// R = 0 and W = I).
func IdentityX(x []float32, r, s int) {
	clear(x)
	for j := 0; j < r; j++ {
		for k := 0; k < s; k++ {
			x[j*s*s+k*s+k] = 1
		}
	}
}

func growF64(b []float64, n int) []float64 {
	if cap(b) < n {
		return make([]float64, n)
	}
	return b[:n]
}
