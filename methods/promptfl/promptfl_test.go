package promptfl

import (
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/tensor"
)

func TestStepFixture(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, "../../testdata/promptfl/init.safetensors")
	ref, meta := paritytest.Read(t, "../../testdata/promptfl/step.safetensors")
	// the batch is the step's inputs alone: the image features come from
	// the images, not from the reference's outputs (issue 17, defect 9)
	out, err := StepFromFile(m, init, stepInputs(ref), meta)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"image_features", "text_features", "logits", "loss", "grad." + ParamCtx, "step1." + ParamCtx} {
		paritytest.Rel(t, name, out[name], ref[name], paritytest.Tol(name))
	}
	paritytest.Rel(t, "update", paritytest.Update(out["step1."+ParamCtx], init[ParamCtx]), paritytest.Update(ref["step1."+ParamCtx], init[ParamCtx]), 1e-4)
}

// TestWeightDecay checks the decay on its own: one momentum-SGD step with
// weight decay wd differs from the step without by exactly −lr·wd·p.
func TestWeightDecay(t *testing.T) {
	paritytest.WeightDecay(t, "../../testdata/promptfl/", StepFromFile, ParamCtx)
}

func TestRoundFixture(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, "../../testdata/promptfl/init.safetensors")
	ref, meta := paritytest.Read(t, "../../testdata/promptfl/round.safetensors")
	out, err := RoundFromFile(m, init, ref, meta)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"client0.batch_losses", "client1.batch_losses", "client0.trained." + ParamCtx, "client1.trained." + ParamCtx, "global." + ParamCtx} {
		paritytest.Rel(t, name, out[name], ref[name], paritytest.Tol(name))
		if strings.Contains(name, ParamCtx) {
			paritytest.Rel(t, name+" update", paritytest.Update(out[name], init[ParamCtx]), paritytest.Update(ref[name], init[ParamCtx]), 1e-4)
		}
	}
}

// TestStepFromFileInputs: cached image features stand in for images, and a
// missing setting is named.
func TestStepFromFileInputs(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, "../../testdata/promptfl/init.safetensors")
	ref, meta := paritytest.Read(t, "../../testdata/promptfl/step.safetensors")
	batch := tensor.Named{"tokens": ref["tokens"], "labels": ref["labels"], "image_features": ref["image_features"]}
	out, err := StepFromFile(m, init, batch, meta)
	if err != nil {
		t.Fatal(err)
	}
	paritytest.Rel(t, "grad from cached features", out["grad."+ParamCtx], ref["grad."+ParamCtx], 1e-4)
	for _, key := range []string{"lr", "n_ctx", "logit_scale"} {
		bad := map[string]string{}
		for k, v := range meta {
			if k != key {
				bad[k] = v
			}
		}
		if _, err := StepFromFile(m, init, batch, bad); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("without %q: error %v", key, err)
		}
	}
	if _, err := StepFromFile(m, tensor.Named{}, batch, meta); err == nil || !strings.Contains(err.Error(), ParamCtx) {
		t.Errorf("without parameters: error %v", err)
	}
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
