// Package tensortest holds the tensor comparisons that tests across the
// tree share.
package tensortest

import (
	"fmt"
	"maps"
	"math"
	"slices"

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
