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
// splits the rows of C over the worker goroutines.
func sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	pa := getBuf(m * k) // op(A), row-major m×k
	defer putBuf(pa)
	for i := 0; i < m; i++ {
		for p := 0; p < k; p++ {
			if transA {
				pa[i*k+p] = a[p*lda+i]
			} else {
				pa[i*k+p] = a[i*lda+p]
			}
		}
	}
	pb := getBuf(k * n) // op(B), row-major k×n
	defer putBuf(pb)
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
	if m*n*k < 1<<15 || inParallel.Load() > 0 {
		workers = 1
	}
	rowsPer := (m + workers - 1) / workers
	if workers == 1 {
		rowBlock(rowTask{pa: pa, pb: pb, c: c, lo: 0, hi: m, n: n, k: k, ldc: ldc, alpha: alpha, beta: beta})
		return
	}
	startPool()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		lo, hi := w*rowsPer, min((w+1)*rowsPer, m)
		if lo >= hi {
			break
		}
		wg.Add(1)
		tasks <- rowTask{pa: pa, pb: pb, c: c, lo: lo, hi: hi, n: n, k: k, ldc: ldc, alpha: alpha, beta: beta, wg: &wg}
	}
	wg.Wait()
}

// rowTask is rows [lo, hi) of one product, C = alpha·A·B + beta·C with A and
// B packed row-major.
type rowTask struct {
	pa, pb, c    []float32
	lo, hi, n, k int
	ldc          int
	alpha, beta  float32
	wg           *sync.WaitGroup
}

// The worker goroutines are started once and reused, so a product spawns
// nothing.
var (
	tasks    = make(chan rowTask)
	poolOnce sync.Once
)

func startPool() {
	poolOnce.Do(func() {
		for w := 0; w < max(runtime.NumCPU(), 2); w++ {
			go func() {
				for t := range tasks {
					rowBlock(t)
					t.wg.Done()
				}
			}()
		}
	})
}

// rowBlock computes rows [lo, hi) of C; each row accumulates scaled rows of
// B (an i-k-j loop the compiler keeps in registers well).
func rowBlock(t rowTask) {
	n, k := t.n, t.k
	acc := getBuf(n)
	defer putBuf(acc)
	for i := t.lo; i < t.hi; i++ {
		clear(acc)
		arow := t.pa[i*k : i*k+k]
		for p, av := range arow {
			if av == 0 {
				continue
			}
			brow := t.pb[p*n : p*n+n]
			for j := range acc {
				acc[j] += av * brow[j]
			}
		}
		crow := t.c[i*t.ldc : i*t.ldc+n]
		if t.beta == 0 {
			for j := range crow {
				crow[j] = t.alpha * acc[j]
			}
		} else {
			for j := range crow {
				crow[j] = t.alpha*acc[j] + t.beta*crow[j]
			}
		}
	}
}

// freeBufs recycles packing buffers (a small best-fit free list that, unlike
// sync.Pool, survives garbage collections), so that steady-state GEMM calls
// do not allocate.
var freeBufs struct {
	sync.Mutex
	bufs [][]float32
}

func getBuf(n int) []float32 {
	freeBufs.Lock()
	defer freeBufs.Unlock()
	best := -1
	for i, b := range freeBufs.bufs {
		if cap(b) >= n && (best < 0 || cap(b) < cap(freeBufs.bufs[best])) {
			best = i
		}
	}
	if best < 0 {
		return make([]float32, n)
	}
	b := freeBufs.bufs[best]
	freeBufs.bufs = append(freeBufs.bufs[:best], freeBufs.bufs[best+1:]...)
	return b[:n]
}

func putBuf(b []float32) {
	freeBufs.Lock()
	defer freeBufs.Unlock()
	freeBufs.bufs = append(freeBufs.bufs, b)
	if len(freeBufs.bufs) > 16 { // drop the smallest
		small := 0
		for i, x := range freeBufs.bufs {
			if cap(x) < cap(freeBufs.bufs[small]) {
				small = i
			}
		}
		freeBufs.bufs = append(freeBufs.bufs[:small], freeBufs.bufs[small+1:]...)
	}
}

// CoreName names the pure-Go kernel.
func CoreName() string { return "go" }

// KernelFamily returns the kernel in use ("go") and no better one.
func KernelFamily() (inUse, best string) { return "go", "" }

// KernelWarning is always empty in the pure-Go build.
func KernelWarning() string { return "" }
