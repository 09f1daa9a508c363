// Package gemm is the single matrix-multiply primitive the model runs on:
// row-major single-precision C = alpha·op(A)·op(B) + beta·C.
//
// The default implementation calls OpenBLAS's cblas_sgemm through cgo; the
// build tag purego selects a portable, parallel Go implementation.
package gemm

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Sgemm computes C = alpha·op(A)·op(B) + beta·C for row-major matrices, where
// op(X) is X or Xᵀ. op(A) is m×k, op(B) is k×n and C is m×n; lda, ldb and ldc
// are the row strides of A, B and C as stored.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	checkSizes(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if !statsOn.Load() || inParallel.Load() > 0 {
		sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	t0 := time.Now()
	sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	statNanos.Add(int64(time.Since(t0)))
	statFlops.Add(2 * int64(m) * int64(n) * int64(k))
	statCalls.Add(1)
}

var (
	inParallel                      atomic.Int32 // Parallels running: their calls run their parts serially and are not counted
	statsOn                         atomic.Bool
	statNanos, statFlops, statCalls atomic.Int64
)

// Stats are GEMM counters collected while EnableStats is on.
type Stats struct {
	Calls   int64
	Flops   int64
	Seconds float64 // wall time inside GEMM calls (summed over calling goroutines)
}

// GFLOPS is the achieved rate inside GEMM calls.
func (s Stats) GFLOPS() float64 {
	if s.Seconds == 0 {
		return 0
	}
	return float64(s.Flops) / s.Seconds / 1e9
}

// EnableStats turns GEMM counting on or off and resets the counters. Calls
// made inside Parallel (many small products at once) are not counted.
func EnableStats(on bool) {
	statNanos.Store(0)
	statFlops.Store(0)
	statCalls.Store(0)
	statsOn.Store(on)
}

// ReadStats returns the counters since EnableStats.
func ReadStats() Stats {
	return Stats{Calls: statCalls.Load(), Flops: statFlops.Load(), Seconds: float64(statNanos.Load()) / 1e9}
}

// MatMul is the common dense case without strides: C[m,n] (+)= op(A)·op(B).
// When accumulate is false C is overwritten.
func MatMul(transA, transB bool, m, n, k int, a, b, c []float32, accumulate bool) {
	lda, ldb := k, n
	if transA {
		lda = m
	}
	if transB {
		ldb = k
	}
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	Sgemm(transA, transB, m, n, k, 1, a, lda, b, ldb, beta, c, n)
}

// Threads returns the number of threads the implementation uses.
func Threads() int { return threads() }

// SetThreads sets the number of threads (values < 1 mean 1).
func SetThreads(n int) {
	if n < 1 {
		n = 1
	}
	setThreads(n)
}

// Backend names the implementation in use ("openblas" or "purego").
func Backend() string { return backend }

// checkSizes panics on a programming error (slices too short for the stated
// shapes); gemm is only called by model code with shapes it computed itself.
func checkSizes(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	if k > 0 && (lda < ac || len(a) < (ar-1)*lda+ac) {
		panic(fmt.Sprintf("gemm: A too small: %d×%d lda %d len %d", ar, ac, lda, len(a)))
	}
	if k > 0 && (ldb < bc || len(b) < (br-1)*ldb+bc) {
		panic(fmt.Sprintf("gemm: B too small: %d×%d ldb %d len %d", br, bc, ldb, len(b)))
	}
	if ldc < n || len(c) < (m-1)*ldc+n {
		panic(fmt.Sprintf("gemm: C too small: %d×%d ldc %d len %d", m, n, ldc, len(c)))
	}
}

// Parallel runs fn(0) … fn(n−1) on all threads, each call with
// single-threaded GEMMs: the way to run many small independent products
// (one per attention head) where splitting each product over threads costs
// more than it saves. Calls must write disjoint memory. A product computed
// inside Parallel has the same bits as outside it: only who runs its parts
// changes, never the parts.
func Parallel(n, threads int, fn func(i int)) {
	if threads < 1 {
		threads = 1
	}
	if threads == 1 || n <= 1 {
		for i := 0; i < n; i++ {
			fn(i)
		}
		return
	}
	inParallel.Add(1)
	defer inParallel.Add(-1)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < min(threads, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}
