//go:build !purego

package gemm

/*
#cgo LDFLAGS: -lopenblas
#include <cblas.h>
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char* openblas_get_corename(void);
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/cpu"
)

const backend = "openblas"

func init() { setThreads(runtime.GOMAXPROCS(0)) }

func threads() int { return int(C.openblas_get_num_threads()) }

func setThreads(n int) { C.openblas_set_num_threads(C.int(n)) }

func sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
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
// which TuneCPU respects), or "" when it does not.
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

// TuneCPU configures OpenBLAS, which reads its settings only when the
// process starts, by re-executing the program once with them in the
// environment (a user's own settings are kept):
//
//   - OPENBLAS_CORETYPE: Debian 12's OpenBLAS does not recognise recent Xeons
//     and falls back to generic "Prescott" kernels at half the GEMM speed; the
//     best kernel family this CPU supports is named instead.
//   - OPENBLAS_THREAD_TIMEOUT=4: OpenBLAS worker threads otherwise spin for
//     about 2^28 cycles after each call, starving the Go goroutines that run
//     the elementwise layers between GEMMs (measured: a ViT-B block forward
//     2.4× slower).
//   - OMP_WAIT_POLICY=PASSIVE: the same for oneDNN's OpenMP threads (the
//     bf16 products), which otherwise spin after each product.
//
// It returns only when no re-execution was needed or it failed. Call it
// first in main.
func TuneCPU() {
	if os.Getenv("PFEDMMA_TUNED") != "" {
		return
	}
	var env []string
	if os.Getenv("OPENBLAS_CORETYPE") == "" {
		if best := bestCore(); best != "" && best != CoreName() {
			env = append(env, "OPENBLAS_CORETYPE="+best)
		}
	}
	if os.Getenv("OPENBLAS_THREAD_TIMEOUT") == "" {
		env = append(env, "OPENBLAS_THREAD_TIMEOUT=4")
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
	env = append(append(os.Environ(), env...), "PFEDMMA_TUNED=1")
	_ = syscall.Exec(exe, os.Args, env) // returns only on failure
}
