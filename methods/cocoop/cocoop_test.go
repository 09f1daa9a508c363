package cocoop

import (
	"math"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/tensor"
)

const dir = "../../testdata/cocoop/"

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

func TestStepFixture(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, dir+"init.safetensors")
	ref, meta := paritytest.Read(t, dir+"step.safetensors")
	out, err := StepFromFile(m, init, ref, meta)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"image_features", "meta_bias", "ctx_shifted", "text_features", "logits", "loss"} {
		paritytest.Rel(t, name, out[name], ref[name], paritytest.Tol(name))
	}
	for _, p := range ParamNames {
		paritytest.Rel(t, "grad."+p, out["grad."+p], ref["grad."+p], 1e-4)
		paritytest.Rel(t, "step1."+p, out["step1."+p], ref["step1."+p], 1e-4)
		paritytest.Rel(t, "update "+p, paritytest.Update(out["step1."+p], init[p]), paritytest.Update(ref["step1."+p], init[p]), updateTol(ref["step1."+p], init[p], 1))
	}
}

func TestRoundFixture(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, dir+"init.safetensors")
	ref, meta := paritytest.Read(t, dir+"round.safetensors")
	out, err := RoundFromFile(m, init, ref, meta)
	if err != nil {
		t.Fatal(err)
	}
	steps := map[string]int{"client0.": 2, "client1.": 1, "global.": 3}
	for _, c := range []string{"client0.", "client1."} {
		paritytest.Rel(t, c+"batch_losses", out[c+"batch_losses"], ref[c+"batch_losses"], 1e-5)
	}
	for _, p := range ParamNames {
		for _, name := range []string{"client0.trained." + p, "client1.trained." + p, "global." + p} {
			paritytest.Rel(t, name, out[name], ref[name], 1e-4)
			paritytest.Rel(t, name+" update", paritytest.Update(out[name], init[p]), paritytest.Update(ref[name], init[p]), updateTol(ref[name], init[p], steps[name[:strings.Index(name, ".")+1]]))
		}
	}
}

// TestRoundProductionPath runs the fixture round through parity.Round (the
// code of `pfedmma run` and `pfedmma round`): every tensor of the prompt
// learner is averaged.
func TestRoundProductionPath(t *testing.T) {
	out := paritytest.Round(t, Method{}, "cocoop/init.safetensors", []string{"cocoop/round.safetensors"}, nil, "cocoop/round.safetensors", 2e-4)
	for _, p := range ParamNames {
		if _, ok := out["global."+p]; !ok {
			t.Errorf("the server holds no %s", p)
		}
	}
}
