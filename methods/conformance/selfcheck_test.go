package conformance

import (
	"testing"

	"github.com/pfedmma/pfedmma/internal/tensortest"
	"github.com/pfedmma/pfedmma/tensor"
)

func vec(v ...float32) *tensor.Tensor { return &tensor.Tensor{Shape: []int{len(v)}, Data: v} }

// TestPrivacyCatchesLeaks: the privacy check fails an upload that holds a
// private tensor by name, or a private value under a shared name, or
// misses a global tensor, and passes a clean one.
func TestPrivacyCatchesLeaks(t *testing.T) {
	spec := map[string][]int{"shared": {4}}
	state := tensor.Named{"param/shared": vec(1, 2, 3, 4), "param/private": vec(5, 6, 7, 8), "opt/private/m": vec(9, 1, 2, 3)}
	for _, tc := range []struct {
		name string
		up   tensor.Named
		bad  bool
	}{
		{"clean", tensor.Named{"shared": vec(1, 2, 3, 4)}, false},
		{"private name", tensor.Named{"shared": vec(1, 2, 3, 4), "private": vec(0, 0, 1, 0)}, true},
		{"private value", tensor.Named{"shared": vec(5, 6, 7, 8)}, true},
		{"optimizer value", tensor.Named{"shared": vec(9, 1, 2, 3)}, true},
		{"global missing", tensor.Named{}, true},
		{"wrong shape", tensor.Named{"shared": vec(1, 2, 3)}, true},
	} {
		p := &privacy{spec: spec, global: spec}
		p.check(0, 0, tc.up, state)
		if got := len(p.errs) > 0; got != tc.bad {
			t.Errorf("%s: failed %v (%v), want %v", tc.name, got, p.errs, tc.bad)
		}
	}
}

// TestSameBitsCatchesOneBit: the outcome comparison sees one flipped bit,
// a missing tensor and NaN payloads.
func TestSameBitsCatchesOneBit(t *testing.T) {
	a := tensor.Named{"x": vec(1, 2, 3)}
	if d := tensortest.BitsDiff(a, tensor.Named{"x": vec(1, 2, 3)}); d != "" {
		t.Errorf("equal tensors differ: %s", d)
	}
	b := tensor.Named{"x": vec(1, 2, 3)}
	b["x"].Data[1] = 2.0000002
	if tensortest.BitsDiff(a, b) == "" {
		t.Error("one flipped bit not seen")
	}
	if tensortest.BitsDiff(a, tensor.Named{"y": vec(1, 2, 3)}) == "" || tensortest.BitsDiff(a, tensor.Named{}) == "" {
		t.Error("a missing tensor not seen")
	}
	if sameMetrics(map[string]float64{"acc": 1}, map[string]float64{"acc": 1.0000001}) == "" {
		t.Error("different metrics not seen")
	}
}
