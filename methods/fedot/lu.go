package fedot

// LU is an LU factorisation with partial pivoting of an n×n float64 matrix
// in LAPACK's column-major layout: the d×d inverse of the Cayley transform
// is never formed during training, each step factors I − R once and solves
// against the batch's features.
type LU struct {
	N   int
	A   []float64 // factors L (unit diagonal) and U, column-major [n, n]
	Piv []int32   // row i was interchanged with row Piv[i] (1-based, as LAPACK)
}

// Factor factors the column-major matrix a [n, n] (copied).
func (f *LU) Factor(a []float64, n int) error {
	f.N = n
	f.A = append(f.A[:0], a[:n*n]...)
	if cap(f.Piv) < n {
		f.Piv = make([]int32, n)
	}
	f.Piv = f.Piv[:n]
	return factor(f.A, f.Piv, n)
}

// Solve overwrites b, n×nrhs column-major with leading dimension ldb, by
// A⁻¹b, or A⁻ᵀb when trans.
func (f *LU) Solve(trans bool, b []float64, nrhs, ldb int) error {
	return solve(trans, f.A, f.Piv, f.N, b, nrhs, ldb)
}

// factorGo is the pure-Go right-looking LU with partial pivoting
// (LAPACK's dgetf2), column-major; the purego build uses it.
func factorGo(a []float64, piv []int32, n int) error {
	for k := 0; k < n; k++ {
		col := a[k*n : k*n+n]
		p := k
		for i := k + 1; i < n; i++ {
			if abs(col[i]) > abs(col[p]) {
				p = i
			}
		}
		piv[k] = int32(p + 1)
		if col[p] == 0 {
			return errSingular
		}
		if p != k {
			for j := 0; j < n; j++ {
				a[j*n+k], a[j*n+p] = a[j*n+p], a[j*n+k]
			}
		}
		inv := 1 / col[k]
		for i := k + 1; i < n; i++ {
			col[i] *= inv
		}
		for j := k + 1; j < n; j++ {
			cj := a[j*n : j*n+n]
			akj := cj[k]
			if akj == 0 {
				continue
			}
			for i := k + 1; i < n; i++ {
				cj[i] -= col[i] * akj
			}
		}
	}
	return nil
}

// solveGo is LAPACK's dgetrs in pure Go.
func solveGo(trans bool, a []float64, piv []int32, n int, b []float64, nrhs, ldb int) {
	for r := 0; r < nrhs; r++ {
		x := b[r*ldb : r*ldb+n]
		if !trans {
			// A = P·L·U: x ← U⁻¹ L⁻¹ Pᵀ b.
			for k := 0; k < n; k++ {
				if p := int(piv[k]) - 1; p != k {
					x[k], x[p] = x[p], x[k]
				}
			}
			for j := 0; j < n; j++ { // L, unit diagonal, by columns
				xj := x[j]
				if xj == 0 {
					continue
				}
				col := a[j*n : j*n+n]
				for i := j + 1; i < n; i++ {
					x[i] -= col[i] * xj
				}
			}
			for j := n - 1; j >= 0; j-- { // U
				col := a[j*n : j*n+n]
				x[j] /= col[j]
				xj := x[j]
				for i := 0; i < j; i++ {
					x[i] -= col[i] * xj
				}
			}
			continue
		}
		// Aᵀ = Uᵀ Lᵀ Pᵀ: x ← P L⁻ᵀ U⁻ᵀ b.
		for j := 0; j < n; j++ { // Uᵀ is lower triangular: row j of Uᵀ is column j of U
			col := a[j*n : j*n+n]
			s := x[j]
			for i := 0; i < j; i++ {
				s -= col[i] * x[i]
			}
			x[j] = s / col[j]
		}
		for j := n - 1; j >= 0; j-- { // Lᵀ, unit diagonal
			col := a[j*n : j*n+n]
			s := x[j]
			for i := j + 1; i < n; i++ {
				s -= col[i] * x[i]
			}
			x[j] = s
		}
		for k := n - 1; k >= 0; k-- {
			if p := int(piv[k]) - 1; p != k {
				x[k], x[p] = x[p], x[k]
			}
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
