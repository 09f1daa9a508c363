package paritytest

import (
	"math"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// Read reads a fixture file: its tensors and its metadata.
func Read(t testing.TB, path string) (tensor.Named, map[string]string) {
	t.Helper()
	x, meta, err := prompt.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return x, meta
}

// Rel checks the fixture README's scale-relative error max|Δ| / max|ref|
// of got against want: above tol is an error (the test goes on); a tensor
// missing or of another length is fatal.
func Rel(t testing.TB, name string, got, want *tensor.Tensor, tol float64) {
	t.Helper()
	if got == nil || want == nil {
		t.Fatalf("%s: missing (got %v, want %v)", name, got != nil, want != nil)
	}
	RelValues(t, name, got.Data, want.Data, tol)
}

// RelValues is Rel on values.
func RelValues(t testing.TB, name string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	var d, ref float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i]-want[i])))
		ref = math.Max(ref, math.Abs(float64(want[i])))
	}
	if r := d / ref; !(r <= tol) {
		t.Errorf("%s: rel error %.3g > %.3g (max|Δ| %.3g)", name, r, tol, d)
	} else {
		t.Logf("%s: rel %.2g", name, r)
	}
}

// Update returns the update p − init.
func Update(p, init *tensor.Tensor) *tensor.Tensor {
	u := p.Clone()
	for i := range u.Data {
		u.Data[i] -= init.Data[i]
	}
	return u
}

// UpdateValues is Update on values.
func UpdateValues(p, init []float32) []float32 {
	u := append([]float32(nil), p...)
	for i := range u {
		u[i] -= init[i]
	}
	return u
}

// Tol is the fixtures' tolerance of an output: 1e-4 for gradients and
// parameters after training (grad.*, *trained.*, step1.*, global.*), 1e-5
// for the forward pass.
func Tol(name string) float64 {
	switch {
	case strings.HasPrefix(name, "grad."), strings.Contains(name, "trained."), strings.HasPrefix(name, "step1."), strings.HasPrefix(name, "global."):
		return 1e-4
	}
	return 1e-5
}
