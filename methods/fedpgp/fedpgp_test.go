package fedpgp

import (
	"math"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

func tinyModel(t testing.TB) *clip.Model {
	t.Helper()
	w, _, err := checkpoint.Load("../../testdata/clip-tiny/openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	return clip.New(w)
}

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
	} else {
		t.Logf("%s: rel %.2g", name, r)
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

var params = []string{ParamU, ParamV, ParamSigma}

func checkStep(t *testing.T, initPath, stepPath string) {
	m := tinyModel(t)
	init, _ := read(t, initPath)
	ref, meta := read(t, stepPath)
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
		rel(t, name, out[name], ref[name], tolFor(name))
	}
	for _, p := range params {
		rel(t, p+" update", update(out["step1."+p], init[p]), update(ref["step1."+p], init[p]), 1e-4)
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
	m := tinyModel(t)
	init, _ := read(t, initPath)
	ref, meta := read(t, roundPath)
	out, err := RoundFromFile(m, init, ref, meta)
	if err != nil {
		t.Fatal(err)
	}
	rel(t, "client0.batch_losses", out["client0.batch_losses"], ref["client0.batch_losses"], 1e-5)
	rel(t, "client1.batch_losses", out["client1.batch_losses"], ref["client1.batch_losses"], 1e-5)
	for _, c := range []string{"client0.trained.", "client1.trained.", "global."} {
		for _, p := range params {
			name := c + p
			if c == "global." && p != ParamSigma {
				if _, ok := out[name]; ok {
					t.Errorf("%s: personal parameter was averaged", name)
				}
				continue
			}
			rel(t, name, out[name], ref[name], 1e-4)
			rel(t, name+" update", update(out[name], init[p]), update(ref[name], init[p]), 1e-4)
		}
	}
}

// TestWeightDecay checks the decay on its own: one momentum-SGD step with
// weight decay wd differs from the step without by −lr·wd·p, for every
// parameter.
func TestWeightDecay(t *testing.T) {
	m := tinyModel(t)
	init, _ := read(t, "../../testdata/fedpgp/init.safetensors")
	ref, meta := read(t, "../../testdata/fedpgp/step.safetensors")
	lr, _ := prompt.MetaFloat(meta, "lr")
	with := func(wd string) tensor.Named {
		mm := map[string]string{}
		for k, v := range meta {
			mm[k] = v
		}
		mm["weight_decay"] = wd
		out, err := StepFromFile(m, init, ref, mm)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	const wd = 0.5
	a, b := with("0"), with("0.5")
	for _, p := range params {
		want := init[p].Clone()
		for i := range want.Data {
			want.Data[i] *= float32(-lr * wd)
		}
		rel(t, p+" weight decay", update(b["step1."+p], a["step1."+p]), want, 1e-3)
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
