//go:build !purego

package fedot

/*
#cgo LDFLAGS: -lopenblas
void dgetrf_(const int* m, const int* n, double* a, const int* lda, int* ipiv, int* info);
void dgetrs_(const char* trans, const int* n, const int* nrhs, const double* a, const int* lda, const int* ipiv, double* b, const int* ldb, int* info);
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

var errSingular = errors.New("fedot: singular matrix in the Cayley transform")

// factor is LAPACK's dgetrf from OpenBLAS.
func factor(a []float64, piv []int32, n int) error {
	cn := C.int(n)
	var info C.int
	C.dgetrf_(&cn, &cn, (*C.double)(unsafe.Pointer(&a[0])), &cn, (*C.int)(unsafe.Pointer(&piv[0])), &info)
	if info > 0 {
		return errSingular
	}
	if info < 0 {
		return fmt.Errorf("fedot: dgetrf argument %d invalid", -info)
	}
	return nil
}

// solve is LAPACK's dgetrs from OpenBLAS.
func solve(trans bool, a []float64, piv []int32, n int, b []float64, nrhs, ldb int) error {
	if nrhs == 0 {
		return nil
	}
	t := C.char('N')
	if trans {
		t = 'T'
	}
	cn, cr, cl := C.int(n), C.int(nrhs), C.int(ldb)
	var info C.int
	C.dgetrs_(&t, &cn, &cr, (*C.double)(unsafe.Pointer(&a[0])), &cn, (*C.int)(unsafe.Pointer(&piv[0])), (*C.double)(unsafe.Pointer(&b[0])), &cl, &info)
	if info != 0 {
		return fmt.Errorf("fedot: dgetrs argument %d invalid", -info)
	}
	return nil
}
