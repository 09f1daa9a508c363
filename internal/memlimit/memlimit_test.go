package memlimit

import (
	"math"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	if err := Check("x", 1<<30, 2048, "lower --y"); err != nil {
		t.Errorf("1 GiB of 2 GiB: %v", err)
	}
	if err := Check("x", 1<<40, 0, "lower --y"); err != nil {
		t.Errorf("unknown memory: %v", err)
	}
	err := Check("pretraining", 3<<30, 2048, "lower --batch")
	if err == nil || !strings.Contains(err.Error(), "pretraining needs about 3.0 GiB") || !strings.Contains(err.Error(), "--batch") {
		t.Errorf("3 GiB of 2 GiB: %v", err)
	}
}

func TestSaturating(t *testing.T) {
	if got := Mul(1<<40, 1<<40); got != math.MaxInt64 {
		t.Errorf("Mul overflow: %d", got)
	}
	if got := Mul(3, 4, 5); got != 60 {
		t.Errorf("Mul: %d", got)
	}
	if got := Add(math.MaxInt64, 1); got != math.MaxInt64 {
		t.Errorf("Add overflow: %d", got)
	}
}
