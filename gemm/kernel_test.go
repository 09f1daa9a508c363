//go:build !purego

package gemm

import "testing"

// TestCoreRank: the warning compares kernel families by this order.
func TestCoreRank(t *testing.T) {
	order := []string{"Prescott", "Sandybridge", "Haswell", "SkylakeX"}
	for i := 1; i < len(order); i++ {
		if coreRank(order[i-1]) >= coreRank(order[i]) {
			t.Errorf("coreRank(%s) = %d ≥ coreRank(%s) = %d", order[i-1], coreRank(order[i-1]), order[i], coreRank(order[i]))
		}
	}
	if coreRank("Zen") != coreRank("Haswell") || coreRank("ARMV8") != 0 {
		t.Error("Zen should rank as Haswell and unknown families as 0")
	}
	inUse, best := KernelFamily()
	w := KernelWarning()
	if weaker := coreRank(inUse) > 0 && coreRank(inUse) < coreRank(best); weaker != (w != "") {
		t.Errorf("kernel %s, best %s: warning %q", inUse, best, w)
	}
}
