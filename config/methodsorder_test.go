package config

import (
	"slices"
	"testing"
)

// TestMethodsSorted: Methods lists the names sorted whatever the order they
// registered in (package initialisation order moves with the import graph;
// `pfedmma methods` and the known-method lists must not).
func TestMethodsSorted(t *testing.T) {
	RegisterMethod("zz_order_b", nil)
	RegisterMethod("zz_order_a", nil)
	got := Methods()
	if !slices.IsSorted(got) {
		t.Errorf("Methods() = %v, not sorted", got)
	}
	if !slices.Contains(got, "zz_order_a") || !slices.Contains(got, "zz_order_b") {
		t.Errorf("Methods() = %v, want zz_order_a and zz_order_b", got)
	}
}
