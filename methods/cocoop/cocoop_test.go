package cocoop

import (
	"math"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/methods/fixturetest"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

const dir = "../../testdata/cocoop/"

func read(t testing.TB, path string) (tensor.Named, map[string]string) {
	t.Helper()
	x, meta, err := prompt.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return x, meta
}

// rel checks the fixture README's scale-relative error max|Δ| / max|ref|.
func rel(t *testing.T, name string, got, want *tensor.Tensor, tol float64) {
	t.Helper()
	if got == nil || want == nil {
		t.Fatalf("%s: missing (got %v, want %v)", name, got != nil, want != nil)
	}
	if len(got.Data) != len(want.Data) {
		t.Fatalf("%s: %d values, want %d", name, len(got.Data), len(want.Data))
	}
	var d, ref float64
	for i := range want.Data {
		d = math.Max(d, math.Abs(float64(got.Data[i]-want.Data[i])))
		ref = math.Max(ref, math.Abs(float64(want.Data[i])))
	}
	if r := d / ref; !(r <= tol) {
		t.Errorf("%s: rel error %.3g > %.3g", name, r, tol)
	}
}

func update(p, init *tensor.Tensor) *tensor.Tensor {
	u := p.Clone()
	for i := range u.Data {
		u.Data[i] -= init.Data[i]
	}
	return u
}

// updateTol is the README's update tolerance: 1e-4 of the update plus one
// float32 spacing of max|p| per SGD step (the meta-net's weights are ≈ 0.1–0.5
// while one step moves them by ≈ 1e-5, so their stored float32 values
// resolve the update only to that spacing).
func updateTol(p, init *tensor.Tensor, steps int) float64 {
	var mp, mu float64
	for i, v := range p.Data {
		mp = math.Max(mp, math.Abs(float64(v)))
		mu = math.Max(mu, math.Abs(float64(v-init.Data[i])))
	}
	spacing := float64(math.Nextafter32(float32(mp), 2*float32(mp)+1) - float32(mp))
	return 1e-4 + float64(steps)*spacing/mu
}

func tolFor(name string) float64 {
	switch {
	case strings.HasPrefix(name, "grad."), strings.Contains(name, "trained."), strings.HasPrefix(name, "step1."), strings.HasPrefix(name, "global."):
		return 1e-4
	}
	return 1e-5
}

func TestStepFixture(t *testing.T) {
	m := fixturetest.Model(t)
	init, _ := read(t, dir+"init.safetensors")
	ref, meta := read(t, dir+"step.safetensors")
	out, err := StepFromFile(m, init, ref, meta)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"image_features", "meta_bias", "ctx_shifted", "text_features", "logits", "loss"} {
		rel(t, name, out[name], ref[name], tolFor(name))
	}
	for _, p := range ParamNames {
		rel(t, "grad."+p, out["grad."+p], ref["grad."+p], 1e-4)
		rel(t, "step1."+p, out["step1."+p], ref["step1."+p], 1e-4)
		rel(t, "update "+p, update(out["step1."+p], init[p]), update(ref["step1."+p], init[p]), updateTol(ref["step1."+p], init[p], 1))
	}
}

func TestRoundFixture(t *testing.T) {
	m := fixturetest.Model(t)
	init, _ := read(t, dir+"init.safetensors")
	ref, meta := read(t, dir+"round.safetensors")
	out, err := RoundFromFile(m, init, ref, meta)
	if err != nil {
		t.Fatal(err)
	}
	steps := map[string]int{"client0.": 2, "client1.": 1, "global.": 3}
	for _, c := range []string{"client0.", "client1."} {
		rel(t, c+"batch_losses", out[c+"batch_losses"], ref[c+"batch_losses"], 1e-5)
	}
	for _, p := range ParamNames {
		for _, name := range []string{"client0.trained." + p, "client1.trained." + p, "global." + p} {
			rel(t, name, out[name], ref[name], 1e-4)
			rel(t, name+" update", update(out[name], init[p]), update(ref[name], init[p]), updateTol(ref[name], init[p], steps[name[:strings.Index(name, ".")+1]]))
		}
	}
}

// TestRoundProductionPath runs the fixture round through fixture.Round (the
// code of `pfedmma run` and `pfedmma round`): every tensor of the prompt
// learner is averaged.
func TestRoundProductionPath(t *testing.T) {
	out := fixturetest.Round(t, Method{}, "cocoop/init.safetensors", []string{"cocoop/round.safetensors"}, nil, "cocoop/round.safetensors", 2e-4)
	for _, p := range ParamNames {
		if _, ok := out["global."+p]; !ok {
			t.Errorf("the server holds no %s", p)
		}
	}
}
