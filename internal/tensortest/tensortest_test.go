package tensortest

import (
	"math"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/tensor"
)

func TestBitsDiff(t *testing.T) {
	mk := func(v ...float32) *tensor.Tensor {
		x := tensor.New(len(v))
		copy(x.Data, v)
		return x
	}
	a := tensor.Named{"a": mk(1, 2), "b": mk(0)}
	if d := BitsDiff(a, tensor.Named{"a": mk(1, 2), "b": mk(0)}); d != "" {
		t.Errorf("equal sets: %q", d)
	}
	negZero := float32(math.Copysign(0, -1))
	for _, tc := range []struct {
		b    tensor.Named
		want string
	}{
		{tensor.Named{"a": mk(1, 2)}, "2 tensors vs 1"},
		{tensor.Named{"a": mk(1, 2), "c": mk(0)}, `"b" missing`},
		{tensor.Named{"a": mk(1), "b": mk(0)}, `"a" shape [2] vs [1]`},
		{tensor.Named{"a": mk(1, 2), "b": mk(negZero)}, `"b"[0]`}, // one bit: the sign of zero
	} {
		if d := BitsDiff(a, tc.b); !strings.Contains(d, tc.want) {
			t.Errorf("BitsDiff = %q, want %q", d, tc.want)
		}
	}
}
