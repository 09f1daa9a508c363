// Package tensortest holds the tensor comparisons that tests across the
// tree share.
package tensortest

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/pfedmma/pfedmma/tensor"
)

// BitsDiff reports the first difference of two tensor sets, bit for bit,
// in name order: a name one set lacks, a shape, or the first element whose
// bits differ ("" when the sets are identical).
func BitsDiff(a, b tensor.Named) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%d tensors vs %d (%v vs %v)", len(a), len(b), slices.Sorted(maps.Keys(a)), slices.Sorted(maps.Keys(b)))
	}
	for _, k := range slices.Sorted(maps.Keys(a)) {
		x, y := a[k], b[k]
		if x == nil || y == nil {
			return fmt.Sprintf("%q missing", k)
		}
		if !slices.Equal(x.Shape, y.Shape) {
			return fmt.Sprintf("%q shape %v vs %v", k, x.Shape, y.Shape)
		}
		for i := range x.Data {
			if math.Float32bits(x.Data[i]) != math.Float32bits(y.Data[i]) {
				return fmt.Sprintf("%q[%d] = %v vs %v", k, i, x.Data[i], y.Data[i])
			}
		}
	}
	return ""
}

// RelMax fails t unless max|got − want| ≤ tol·max|want|: the error is
// relative to the size of the whole tensor (a gradient, an update), so a
// halved, zeroed or sign-flipped tensor is off by ½, 1 or 2 of it. A zero
// reference checks nothing and fails.
func RelMax(t testing.TB, name string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	var d, ref float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i])-float64(want[i])))
		ref = math.Max(ref, math.Abs(float64(want[i])))
	}
	if ref == 0 {
		t.Fatalf("%s: the reference is zero: it checks nothing", name)
	}
	if !(d <= tol*ref) {
		t.Errorf("%s: max|Δ| %.3g = %.3g of max|ref| %.3g, tolerance %.3g", name, d, d/ref, ref, tol)
	} else {
		t.Logf("%s: rel %.2g", name, d/ref)
	}
}
