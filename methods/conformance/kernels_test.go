//go:build !purego

package conformance

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/pfedmma/pfedmma/gemm"
)

// kernelChildEnv marks a child test process of
// TestDeterminismUnderEveryKernelFamily; its TestMain checks that OpenBLAS
// runs the family the parent asked for.
const kernelChildEnv = "PFEDMMA_KERNEL_CHILD"

// kernelMethods are the methods whose determinism the other kernel families
// re-check: the flagship and an adapter (CLIP-Adapter's global tensors were
// the first to differ); two, to keep the suite's time.
var kernelMethods = []string{"pfedmma", "clip_adapter"}

// kernelFamilies are the OpenBLAS kernel families this CPU can run, weakest
// first.
func kernelFamilies() []string {
	out := []string{"Prescott"}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		out = append(out, "Haswell")
	}
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL {
		out = append(out, "SkylakeX")
	}
	return out
}

// TestDeterminismUnderEveryKernelFamily: network = simulation, resume and
// predict = evaluation hold bit for bit under every OpenBLAS kernel family
// this CPU runs, not only the one this process uses (which the same tests
// check in this pass). Each family runs in a child process of this test
// binary with OPENBLAS_CORETYPE set in the child's environment only, for
// kernelMethods.
func TestDeterminismUnderEveryKernelFamily(t *testing.T) {
	skipPureGo(t)
	if os.Getenv(kernelChildEnv) != "" {
		t.Skip("a child of this test")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := "^(TestNetworkEqualsSimulation|TestResumeCoordinator|TestPredictEqualsEvaluation)$/^(" + strings.Join(kernelMethods, "|") + ")$"
	for _, family := range kernelFamilies() {
		if strings.EqualFold(family, gemm.CoreName()) {
			continue // this process's family: the tests themselves ran it
		}
		t.Run(family, func(t *testing.T) {
			cmd := exec.Command(exe, "-test.run", run, "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), "OPENBLAS_CORETYPE="+family, kernelChildEnv+"="+family)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s kernels: %v\n%s", family, err, failures(out))
			}
			for _, test := range []string{"TestNetworkEqualsSimulation", "TestResumeCoordinator", "TestPredictEqualsEvaluation"} {
				for _, m := range kernelMethods {
					if !strings.Contains(string(out), "--- PASS: "+test+"/"+m+" ") {
						t.Errorf("%s kernels: %s/%s did not pass:\n%s", family, test, m, failures(out))
					}
				}
			}
		})
	}
}

// failures is the part of a child's verbose output worth reading: its
// failure and log lines.
func failures(out []byte) string {
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "FAIL") || strings.Contains(l, "_test.go:") || strings.Contains(l, "kernel") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// kernelChild fails a child process whose OpenBLAS does not run the
// family its parent asked for (so a family OpenBLAS ignores cannot pass
// unnoticed).
func kernelChild() string {
	want := os.Getenv(kernelChildEnv)
	if want == "" || strings.EqualFold(want, gemm.CoreName()) {
		return ""
	}
	return "OPENBLAS_CORETYPE=" + want + " but OpenBLAS runs " + gemm.CoreName() + " kernels"
}
