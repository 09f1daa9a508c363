package fedpgp

import (
	"testing"

	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/tensor"
)

var params = []string{ParamU, ParamV, ParamSigma}

func checkStep(t *testing.T, initPath, stepPath string) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, initPath)
	ref, meta := paritytest.Read(t, stepPath)
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
		paritytest.Rel(t, name, out[name], ref[name], paritytest.Tol(name))
	}
	for _, p := range params {
		paritytest.Rel(t, p+" update", paritytest.Update(out["step1."+p], init[p]), paritytest.Update(ref["step1."+p], init[p]), 1e-4)
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
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, initPath)
	ref, meta := paritytest.Read(t, roundPath)
	out, err := RoundFromFile(m, init, ref, meta)
	if err != nil {
		t.Fatal(err)
	}
	paritytest.Rel(t, "client0.batch_losses", out["client0.batch_losses"], ref["client0.batch_losses"], 1e-5)
	paritytest.Rel(t, "client1.batch_losses", out["client1.batch_losses"], ref["client1.batch_losses"], 1e-5)
	for _, c := range []string{"client0.trained.", "client1.trained.", "global."} {
		for _, p := range params {
			name := c + p
			if c == "global." && p != ParamSigma {
				if _, ok := out[name]; ok {
					t.Errorf("%s: personal parameter was averaged", name)
				}
				continue
			}
			paritytest.Rel(t, name, out[name], ref[name], 1e-4)
			paritytest.Rel(t, name+" update", paritytest.Update(out[name], init[p]), paritytest.Update(ref[name], init[p]), 1e-4)
		}
	}
}

// TestWeightDecay checks the decay on its own: one momentum-SGD step with
// weight decay wd differs from the step without by −lr·wd·p, for every
// parameter.
func TestWeightDecay(t *testing.T) {
	paritytest.WeightDecay(t, "../../testdata/fedpgp/", StepFromFile, params...)
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
