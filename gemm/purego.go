//go:build purego

package gemm

import (
	"runtime"
	"sync"
	"sync/atomic"
)

const backend = "purego"

var nthreads atomic.Int64

func init() { nthreads.Store(int64(runtime.GOMAXPROCS(0))) }

func threads() int { return int(nthreads.Load()) }

func setThreads(n int) { nthreads.Store(int64(n)) }

// sgemm packs op(A) into row-major m×k and op(B) into row-major k×n, then
// splits the rows of C over goroutines; each row is an accumulation of
// scaled rows of B (an i-k-j loop the compiler keeps in registers well).
func sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	pa := make([]float32, m*k) // op(A), row-major m×k
	for i := 0; i < m; i++ {
		for p := 0; p < k; p++ {
			if transA {
				pa[i*k+p] = a[p*lda+i]
			} else {
				pa[i*k+p] = a[i*lda+p]
			}
		}
	}
	pb := make([]float32, k*n) // op(B), row-major k×n
	for p := 0; p < k; p++ {
		for j := 0; j < n; j++ {
			if transB {
				pb[p*n+j] = b[j*ldb+p]
			} else {
				pb[p*n+j] = b[p*ldb+j]
			}
		}
	}
	workers := min(threads(), m)
	if m*n*k < 1<<15 {
		workers = 1
	}
	rowsPer := (m + workers - 1) / workers
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		lo, hi := w*rowsPer, min((w+1)*rowsPer, m)
		if lo >= hi {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			acc := make([]float32, n)
			for i := lo; i < hi; i++ {
				clear(acc)
				arow := pa[i*k : i*k+k]
				for p, av := range arow {
					if av == 0 {
						continue
					}
					brow := pb[p*n : p*n+n]
					for j := range acc {
						acc[j] += av * brow[j]
					}
				}
				crow := c[i*ldc : i*ldc+n]
				if beta == 0 {
					for j := range crow {
						crow[j] = alpha * acc[j]
					}
				} else {
					for j := range crow {
						crow[j] = alpha*acc[j] + beta*crow[j]
					}
				}
			}
		}()
	}
	wg.Wait()
}

// CoreName names the pure-Go kernel.
func CoreName() string { return "go" }

// TuneCPU does nothing in the pure-Go build.
func TuneCPU() {}
