package kgcoop

import (
	"math"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/methods/fixturetest"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

const dir = "../../testdata/kgcoop/"

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

func tolFor(name string) float64 {
	switch {
	case strings.HasPrefix(name, "grad."), strings.Contains(name, "trained."), strings.HasPrefix(name, "step1."), strings.HasPrefix(name, "global."):
		return 1e-4
	}
	return 1e-5
}

func TestStepFixture(t *testing.T) {
	m := fixturetest.Model(t)
	for _, c := range [][2]string{{"init.safetensors", "step.safetensors"}, {"init_rand.safetensors", "step_rand.safetensors"}} {
		t.Run(c[1], func(t *testing.T) {
			init, _ := read(t, dir+c[0])
			ref, meta := read(t, dir+c[1])
			out, err := StepFromFile(m, init, ref, meta)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"image_features", "text_features", "template_features", "logits", "loss", "loss_ce"} {
				rel(t, name, out[name], ref[name], tolFor(name))
			}
			// cos and score: absolute (score is 0 at init)
			for _, name := range []string{"cos", "score"} {
				var d float64
				for i, v := range ref[name].Data {
					d = math.Max(d, math.Abs(float64(out[name].Data[i]-v)))
				}
				if d > 1e-6 {
					t.Errorf("%s: max|Δ| %.3g > 1e-6", name, d)
				}
			}
			rel(t, "grad", out["grad."+ParamCtx], ref["grad."+ParamCtx], 1e-4)
			rel(t, "step1", out["step1."+ParamCtx], ref["step1."+ParamCtx], 1e-4)
			rel(t, "update", update(out["step1."+ParamCtx], init[ParamCtx]), update(ref["step1."+ParamCtx], init[ParamCtx]), 1e-4)
		})
	}
}

func TestRoundFixture(t *testing.T) {
	m := fixturetest.Model(t)
	init, _ := read(t, dir+"init_rand.safetensors")
	ref, meta := read(t, dir+"round.safetensors")
	out, err := RoundFromFile(m, init, ref, meta)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"client0.", "client1."} {
		rel(t, c+"batch_losses", out[c+"batch_losses"], ref[c+"batch_losses"], 1e-5)
	}
	for _, name := range []string{"client0.trained." + ParamCtx, "client1.trained." + ParamCtx, "global." + ParamCtx} {
		rel(t, name, out[name], ref[name], 1e-4)
		rel(t, name+" update", update(out[name], init[ParamCtx]), update(ref[name], init[ParamCtx]), 1e-4)
	}
}

// TestRoundProductionPath runs the fixture round through fixture.Round (the
// code of `pfedmma run` and `pfedmma round`); the hand-crafted prompts come
// from the run's label space (here the fixture's rows, which are the
// template's).
func TestRoundProductionPath(t *testing.T) {
	out := fixturetest.Round(t, Method{}, "kgcoop/init_rand.safetensors", []string{"kgcoop/round.safetensors"}, nil, "kgcoop/round.safetensors", 1e-4)
	if _, ok := out["global."+ParamCtx]; !ok {
		t.Error("the server holds no context")
	}
}
