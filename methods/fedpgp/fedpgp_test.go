package fedpgp

import (
	"testing"

	"github.com/pfedmma/pfedmma/methods/fixturetest"
	"github.com/pfedmma/pfedmma/tensor"
)

var params = []string{ParamU, ParamV, ParamSigma}

func checkStep(t *testing.T, initPath, stepPath string) {
	m := fixturetest.Model(t)
	init, _ := fixturetest.Read(t, initPath)
	ref, meta := fixturetest.Read(t, stepPath)
	// the batch is the step's inputs alone: the image features come from
	// the images, not from the reference's outputs (issue 17, defect 9)
	out, err := StepFromFile(m, init, stepInputs(ref), meta)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"image_features", "text_features", "text_features_sigma", "text_features_UV", "text_features_0",
		"cos_pos", "cos_neg", "logits", "loss", "loss_ce", "loss_con"}
	for _, p := range params {
		names = append(names, "grad."+p, "step1."+p)
	}
	for _, name := range names {
		fixturetest.Rel(t, name, out[name], ref[name], fixturetest.Tol(name))
	}
	for _, p := range params {
		fixturetest.Rel(t, p+" update", fixturetest.Update(out["step1."+p], init[p]), fixturetest.Update(ref["step1."+p], init[p]), 1e-4)
	}
}

func TestStepFixture(t *testing.T) {
	checkStep(t, "../../testdata/fedpgp/init.safetensors", "../../testdata/fedpgp/step.safetensors")
}

// TestStepFarFixture: U·V no longer small, so the gradient through s⁻ matters.
func TestStepFarFixture(t *testing.T) {
	checkStep(t, "../../testdata/fedpgp/init_far.safetensors", "../../testdata/fedpgp/step_far.safetensors")
}

func TestRoundFixture(t *testing.T) {
	checkRound(t, "../../testdata/fedpgp/init.safetensors", "../../testdata/fedpgp/round.safetensors")
}

func checkRound(t *testing.T, initPath, roundPath string) {
	m := fixturetest.Model(t)
	init, _ := fixturetest.Read(t, initPath)
	ref, meta := fixturetest.Read(t, roundPath)
	out, err := RoundFromFile(m, init, ref, meta)
	if err != nil {
		t.Fatal(err)
	}
	fixturetest.Rel(t, "client0.batch_losses", out["client0.batch_losses"], ref["client0.batch_losses"], 1e-5)
	fixturetest.Rel(t, "client1.batch_losses", out["client1.batch_losses"], ref["client1.batch_losses"], 1e-5)
	for _, c := range []string{"client0.trained.", "client1.trained.", "global."} {
		for _, p := range params {
			name := c + p
			if c == "global." && p != ParamSigma {
				if _, ok := out[name]; ok {
					t.Errorf("%s: personal parameter was averaged", name)
				}
				continue
			}
			fixturetest.Rel(t, name, out[name], ref[name], 1e-4)
			fixturetest.Rel(t, name+" update", fixturetest.Update(out[name], init[p]), fixturetest.Update(ref[name], init[p]), 1e-4)
		}
	}
}

// TestWeightDecay checks the decay on its own: one momentum-SGD step with
// weight decay wd differs from the step without by −lr·wd·p, for every
// parameter.
func TestWeightDecay(t *testing.T) {
	fixturetest.WeightDecay(t, "../../testdata/fedpgp/", StepFromFile, params...)
}

// stepInputs keeps a step fixture's inputs (tokens, labels, images) and
// drops its outputs, image features included.
func stepInputs(ref tensor.Named) tensor.Named {
	in := tensor.Named{}
	for _, k := range []string{"tokens", "labels", "images"} {
		if v, ok := ref[k]; ok {
			in[k] = v
		}
	}
	return in
}
