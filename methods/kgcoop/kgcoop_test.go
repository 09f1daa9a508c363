package kgcoop

import (
	"math"
	"testing"

	"github.com/pfedmma/pfedmma/parity/paritytest"
)

const dir = "../../testdata/kgcoop/"

func TestStepFixture(t *testing.T) {
	m := paritytest.Model(t)
	for _, c := range [][2]string{{"init.safetensors", "step.safetensors"}, {"init_rand.safetensors", "step_rand.safetensors"}} {
		t.Run(c[1], func(t *testing.T) {
			init, _ := paritytest.Read(t, dir+c[0])
			ref, meta := paritytest.Read(t, dir+c[1])
			out, err := StepFromFile(m, init, ref, meta)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"image_features", "text_features", "template_features", "logits", "loss", "loss_ce"} {
				paritytest.Rel(t, name, out[name], ref[name], paritytest.Tol(name))
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
			paritytest.Rel(t, "grad", out["grad."+ParamCtx], ref["grad."+ParamCtx], 1e-4)
			paritytest.Rel(t, "step1", out["step1."+ParamCtx], ref["step1."+ParamCtx], 1e-4)
			paritytest.Rel(t, "update", paritytest.Update(out["step1."+ParamCtx], init[ParamCtx]), paritytest.Update(ref["step1."+ParamCtx], init[ParamCtx]), 1e-4)
		})
	}
}

func TestRoundFixture(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, dir+"init_rand.safetensors")
	ref, meta := paritytest.Read(t, dir+"round.safetensors")
	out, err := RoundFromFile(m, init, ref, meta)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"client0.", "client1."} {
		paritytest.Rel(t, c+"batch_losses", out[c+"batch_losses"], ref[c+"batch_losses"], 1e-5)
	}
	for _, name := range []string{"client0.trained." + ParamCtx, "client1.trained." + ParamCtx, "global." + ParamCtx} {
		paritytest.Rel(t, name, out[name], ref[name], 1e-4)
		paritytest.Rel(t, name+" update", paritytest.Update(out[name], init[ParamCtx]), paritytest.Update(ref[name], init[ParamCtx]), 1e-4)
	}
}

// TestRoundProductionPath runs the fixture round through parity.Round (the
// code of `pfedmma run` and `pfedmma round`); the hand-crafted prompts come
// from the run's label space (here the fixture's rows, which are the
// template's).
func TestRoundProductionPath(t *testing.T) {
	out := paritytest.Round(t, Method{}, "kgcoop/init_rand.safetensors", []string{"kgcoop/round.safetensors"}, nil, "kgcoop/round.safetensors", 1e-4)
	if _, ok := out["global."+ParamCtx]; !ok {
		t.Error("the server holds no context")
	}
}
