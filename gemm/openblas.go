//go:build !purego

package gemm

/*
#cgo LDFLAGS: -lopenblas
#include <cblas.h>
void openblas_set_num_threads(int num_threads);
char* openblas_get_corename(void);
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/cpu"
)

const backend = "openblas"

// nthreads is the number of parts a large product is split into. OpenBLAS
// itself always runs on one thread: its own partition of a product depends
// on its process-wide thread count, which Parallel lowered while other
// goroutines computed, so results differed in the last bits from one call to
// the next (see partition).
var nthreads atomic.Int64

func init() {
	C.openblas_set_num_threads(1)
	nthreads.Store(int64(runtime.GOMAXPROCS(0)))
}

func threads() int { return int(nthreads.Load()) }

func setThreads(n int) { nthreads.Store(int64(n)) }

// sgemm computes the product in the parts partition chooses, each a
// single-threaded OpenBLAS call, concurrently unless called from Parallel.
// The parts depend only on the shape and the configured thread count, so
// the bits do too, whoever runs them and whatever else runs meanwhile.
func sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	parts, per, alongM := partition(m, n, k, threads())
	if parts == 1 {
		sgemm1(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	dim := n
	if alongM {
		dim = m
	}
	part := func(p int) {
		lo, hi := p*per, min((p+1)*per, dim)
		if alongM {
			aOff := lo * lda // rows of op(A) = rows of A
			if transA {
				aOff = lo // columns of A
			}
			sgemm1(transA, transB, hi-lo, n, k, alpha, a[aOff:], lda, b, ldb, beta, c[lo*ldc:], ldc)
			return
		}
		bOff := lo // columns of B
		if transB {
			bOff = lo * ldb // rows of B
		}
		sgemm1(transA, transB, m, hi-lo, k, alpha, a, lda, b[bOff:], ldb, beta, c[lo:], ldc)
	}
	if inParallel.Load() > 0 {
		for p := 0; p < parts; p++ {
			part(p)
		}
		return
	}
	var wg sync.WaitGroup
	for p := 1; p < parts; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			part(p)
		}()
	}
	part(0)
	wg.Wait()
}

// minSplitMNK is the size (m·n·k) up to which a product runs as one call,
// OpenBLAS's own threshold for threading (SMP_THRESHOLD_MIN ×
// GEMM_MULTITHREAD_THRESHOLD).
const minSplitMNK = 65536 * 4

// partAlign keeps every part but the last a multiple of the micro-kernels'
// unrolling, so each part runs whole kernel blocks.
const partAlign = 16

// partition splits a product into parts along the larger of m and n (whose
// other operand, packed whole by every part, is the smaller): about one
// part per thread, each per rows or columns wide (a multiple of partAlign,
// the last one narrower), and a single part for small products.
func partition(m, n, k, threads int) (parts, per int, alongM bool) {
	alongM = m >= n
	dim := n
	if alongM {
		dim = m
	}
	if threads <= 1 || float64(m)*float64(n)*float64(k) <= minSplitMNK || dim < 2*partAlign {
		return 1, dim, alongM
	}
	per = (dim + threads - 1) / threads
	per = (per + partAlign - 1) / partAlign * partAlign
	return (dim + per - 1) / per, per, alongM
}

func sgemm1(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	ta, tb := uint32(C.CblasNoTrans), uint32(C.CblasNoTrans)
	if transA {
		ta = C.CblasTrans
	}
	if transB {
		tb = C.CblasTrans
	}
	var pa, pb *C.float
	if k > 0 {
		pa = (*C.float)(unsafe.Pointer(&a[0]))
		pb = (*C.float)(unsafe.Pointer(&b[0]))
	} else {
		// C = beta·C; BLAS still needs valid pointers.
		var dummy [1]float32
		pa = (*C.float)(unsafe.Pointer(&dummy[0]))
		pb = pa
		lda, ldb = max(lda, 1), max(ldb, 1)
	}
	C.cblas_sgemm(C.CblasRowMajor, ta, tb, C.blasint(m), C.blasint(n), C.blasint(k),
		C.float(alpha), pa, C.blasint(lda), pb, C.blasint(ldb),
		C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.blasint(ldc))
}

// CoreName is the CPU kernel family OpenBLAS selected (for example
// "SkylakeX" or "Haswell").
func CoreName() string { return C.GoString(C.openblas_get_corename()) }

// bestCore is the OpenBLAS kernel family this CPU supports.
func bestCore() string {
	switch {
	case cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL:
		return "SkylakeX"
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return "Haswell"
	}
	return ""
}

// coreRank orders the x86 OpenBLAS kernel families by GEMM speed (0:
// unknown). Zen is OpenBLAS's name for Haswell-class kernels on AMD.
func coreRank(name string) int {
	switch strings.ToLower(name) {
	case "prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "barcelona", "bobcat", "bulldozer", "piledriver", "steamroller", "excavator":
		return 1
	case "sandybridge":
		return 2
	case "haswell", "zen":
		return 3
	case "skylakex", "cooperlake", "sapphirerapids":
		return 4
	}
	return 0
}

// KernelFamily returns the OpenBLAS kernel family in use and the best one
// this CPU supports ("" when unknown).
func KernelFamily() (inUse, best string) { return CoreName(), bestCore() }

// KernelWarning is a one-line warning when OpenBLAS runs a kernel family
// weaker than the CPU supports (typically OPENBLAS_CORETYPE set by the user,
// which tune respects), or "" when it does not.
func KernelWarning() string {
	inUse, best := KernelFamily()
	r, rb := coreRank(inUse), coreRank(best)
	if r == 0 || rb == 0 || r >= rb {
		return ""
	}
	how := "OpenBLAS chose it"
	if v := os.Getenv("OPENBLAS_CORETYPE"); v != "" {
		how = "OPENBLAS_CORETYPE=" + v
	}
	return fmt.Sprintf("OpenBLAS runs %s kernels (%s) but this CPU supports %s: GEMMs run up to about 2× slower; unset OPENBLAS_CORETYPE or set it to %s", inUse, how, best, best)
}

// init chooses the OpenBLAS kernel family for every program that links
// this package, pfedmma and each test binary alike (tune).
func init() { tune() }

// tune configures OpenBLAS and oneDNN's OpenMP, which read their settings
// when the process loads them, before any Go code runs, by re-executing the
// program once with them in the environment; a setting already present,
// the user's or the machine's, is kept:
//
//   - OPENBLAS_CORETYPE: Debian 12's OpenBLAS does not recognise recent Xeons
//     and falls back to generic "Prescott" kernels at half the GEMM speed; the
//     best kernel family this CPU supports is named instead.
//   - OMP_WAIT_POLICY=PASSIVE: oneDNN's OpenMP threads (the bf16 products)
//     otherwise spin after each product, starving the Go goroutines that run
//     the elementwise layers between GEMMs.
//
// OpenBLAS's own threads never work (sgemm splits products itself), so its
// thread timeout no longer matters. tune returns only when no re-execution
// was needed or it failed (the program then runs as it is).
func tune() {
	if os.Getenv(tunedEnv) != "" {
		return
	}
	var env []string
	if os.Getenv("OPENBLAS_CORETYPE") == "" {
		if best := bestCore(); best != "" && coreRank(best) > coreRank(CoreName()) {
			env = append(env, "OPENBLAS_CORETYPE="+best)
		}
	}
	if os.Getenv("OMP_WAIT_POLICY") == "" {
		env = append(env, "OMP_WAIT_POLICY=PASSIVE")
	}
	if len(env) == 0 {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	env = append(append(os.Environ(), env...), tunedEnv+"=1")
	_ = syscall.Exec(exe, os.Args, env) // returns only on failure
}

// tunedEnv marks a process that tune has re-executed (and its children,
// which inherit the settings it chose).
const tunedEnv = "PFEDMMA_TUNED"
