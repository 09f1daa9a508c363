//go:build purego

package fedot

import "errors"

var errSingular = errors.New("fedot: singular matrix in the Cayley transform")

func factor(a []float64, piv []int32, n int) error { return factorGo(a, piv, n) }

func solve(trans bool, a []float64, piv []int32, n int, b []float64, nrhs, ldb int) error {
	solveGo(trans, a, piv, n, b, nrhs, ldb)
	return nil
}
