package promptsrc

import (
	"math"
	"testing"

	"github.com/pfedmma/pfedmma/clip"

	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/tensor"
)

const dir = "../../testdata/promptsrc/"

// updateTol is the tolerance of an update p − init compared relative to its
// largest entry: base, or more where the stored float32 p itself carries
// rounding (half an ulp of max|p| from each of the two values compared)
// that is larger than that relative to a small update.
func maxAbs(x []float32) float64 {
	var m float64
	for _, v := range x {
		m = math.Max(m, math.Abs(float64(v)))
	}
	return m
}

func updateTol(p, init *tensor.Tensor, base float64) float64 {
	var pm, um float64
	for i, v := range p.Data {
		pm = math.Max(pm, math.Abs(float64(v)))
		um = math.Max(um, math.Abs(float64(v-init.Data[i])))
	}
	ulp := math.Nextafter32(float32(pm), float32(math.Inf(1))) - float32(pm)
	return math.Max(base, 4*float64(ulp)/um)
}

// TestStepFixture reproduces testdata/promptsrc/step (the authors' code on
// the tiny CLIP, J_t 3 ≠ J_v 2): the features, the frozen anchors, the
// logits, every loss term, the gradient of all five prompts and one SGD
// step.
func TestStepFixture(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, dir+"init.safetensors")
	ref, meta := paritytest.Read(t, dir+"step.safetensors")
	out, err := StepFromFile(m, init, ref, meta)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"image_features", "text_features", "logits", "zs_logits", "loss", TermCE, TermL1Text, TermL1Image} {
		paritytest.Rel(t, name, out[name], ref[name], 1e-5)
	}
	// the anchors are stored raw; the learner keeps them normalised
	for _, name := range []string{"zs_text_features", "zs_image_features"} {
		want := ref[name].Clone()
		clip.NormalizeRows(nil, want.Data, want.Shape[0], want.Shape[1])
		paritytest.Rel(t, name, out[name], want, 1e-5)
	}
	// the KL is a sum over B rows of differences of log-probabilities: its
	// error is bounded by 2·B times the logits' absolute error (1e-5 of the
	// largest logit), not by 1e-5 of its own, smaller, size
	B := ref["logits"].Shape[0]
	logitErr := 1e-5 * maxAbs(ref["logits"].Data)
	for _, name := range []string{TermKLSum, TermSCL} {
		div := 1.0
		if name == TermSCL {
			div = float64(len(ref["logits"].Data))
		}
		paritytest.Rel(t, name, out[name], ref[name], 2*float64(B)*logitErr/div/maxAbs(ref[name].Data))
	}
	if len(init) != 5 {
		t.Fatalf("init holds %d tensors, want 5 (ctx, 2 deep text, VPT, 1 deep visual)", len(init))
	}
	for name := range init {
		paritytest.Rel(t, "grad."+name, out["grad."+name], ref["grad."+name], 1e-4)
		paritytest.Rel(t, "step1."+name, out["step1."+name], ref["step1."+name], 1e-5)
		paritytest.Rel(t, "update "+name, paritytest.Update(out["step1."+name], init[name]), paritytest.Update(ref["step1."+name], init[name]),
			updateTol(ref["step1."+name], init[name], 1e-4))
	}
}

// TestGPAFixture reproduces testdata/promptsrc/gpa: three epochs of the
// authors' trainer (two batches each, one optimizer), the state after
// every epoch, the Gaussian weights (μ 2, σ 1) and the aggregated model
// that replaces the last epoch's (0.46–0.55 away from it: a run without
// GPA fails).
func TestGPAFixture(t *testing.T) {
	m := paritytest.Model(t)
	init, _ := paritytest.Read(t, dir+"init.safetensors")
	ref, meta := paritytest.Read(t, dir+"gpa.safetensors")
	out, err := GPAFromFile(m, init, ref, meta)
	if err != nil {
		t.Fatal(err)
	}
	paritytest.Rel(t, "gpa_weights", out["gpa_weights"], ref["gpa_weights"], 1e-6)
	paritytest.Rel(t, "batch_losses", out["batch_losses"], ref["batch_losses"], 1e-5)
	for name := range init {
		for _, k := range []string{"epoch0.", "epoch1.", "epoch2.", "gpa."} {
			paritytest.Rel(t, k+name, out[k+name], ref[k+name], 1e-4)
			paritytest.Rel(t, "update "+k+name, paritytest.Update(out[k+name], init[name]), paritytest.Update(ref[k+name], init[name]),
				updateTol(ref[k+name], init[name], 1e-4))
		}
	}
}
