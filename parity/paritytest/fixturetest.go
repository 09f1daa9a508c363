// Package fixturetest checks a method's `pfedmma round` against a reference
// fixture through the production path (parity.RunRound), with the
// fixtures' scale-relative tolerances. It is used by the methods' tests.
package paritytest

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

// Testdata is the fixtures folder seen from a package under methods/.
const Testdata = "../../testdata/"

// Model loads the tiny CLIP of the fixtures.
func Model(t testing.TB) *clip.Model {
	t.Helper()
	w, _, err := checkpoint.Load(Testdata + "clip-tiny/openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	return clip.New(w)
}

// Round runs meth's fixture round on params and batches (paths under
// testdata) and compares every "client<i>.trained.*" and "global.*" tensor
// of want (a path under testdata) with the fixtures' tolerance: rel =
// max|Δ|/max|ref| ≤ tol, on the values and on the update p − init.
func Round(t *testing.T, meth methods.Method, params string, batches []string, sets []string, want string, tol float64) tensor.Named {
	t.Helper()
	var paths []string
	for _, b := range batches {
		paths = append(paths, Testdata+b)
	}
	f, err := parity.Load(Model(t), Testdata+params, paths, sets)
	if err != nil {
		t.Fatal(err)
	}
	out, err := parity.RunRound(context.Background(), meth, f)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := parity.Load(f.Model, Testdata+want, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for name, w := range ref.Params {
		_, param, ok := strings.Cut(name, ".trained.")
		if !ok {
			param, ok = strings.CutPrefix(name, "global.")
		}
		if !ok {
			continue
		}
		g, ok := out[name]
		if !ok {
			t.Fatalf("round produced no %s", name)
		}
		Close(t, name, g.Data, w.Data, tol)
		if init, ok := f.Params[param]; ok && len(init.Data) == len(w.Data) {
			du, dw := make([]float32, len(w.Data)), make([]float32, len(w.Data))
			for i := range w.Data {
				du[i], dw[i] = g.Data[i]-init.Data[i], w.Data[i]-init.Data[i]
			}
			Close(t, name+" (update)", du, dw, tol)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no tensor compared")
	}
	return out
}

// Close fails unless max|got − want| ≤ tol·max|want|.
func Close(t testing.TB, name string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	var maxRef, maxD float64
	for i := range want {
		maxRef = math.Max(maxRef, math.Abs(float64(want[i])))
		maxD = math.Max(maxD, math.Abs(float64(got[i]-want[i])))
	}
	if !(maxD <= tol*maxRef) {
		t.Fatalf("%s: rel error %.3g > %.3g (max|Δ| %.3g, max|ref| %.3g)", name, maxD/maxRef, tol, maxD, maxRef)
	}
	if testing.Verbose() {
		t.Logf("%s: rel error %.3g ≤ %.3g", name, maxD/maxRef, tol)
	}
}
