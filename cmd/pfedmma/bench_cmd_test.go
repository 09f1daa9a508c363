package main

import (
	"strings"
	"testing"
)

// TestBenchTrainRefusesBadSizes: a size flag of `bench train` out of range
// is refused naming it (before: --batch 0 became the default 32 and the
// benchmark ran on).
func TestBenchTrainRefusesBadSizes(t *testing.T) {
	for _, c := range [][2]string{{"--batch", "0"}, {"--batch", "-3"}, {"--steps", "0"}, {"--classes", "0"}, {"--start", "13"}, {"--dim", "0"}} {
		_, err := execute(t, "bench", "train", c[0], c[1])
		if err == nil || !strings.Contains(err.Error(), c[0]+" "+c[1]) {
			t.Errorf("bench train %s %s: error %v, want one naming the flag", c[0], c[1], err)
		}
	}
}
