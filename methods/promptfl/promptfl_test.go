package promptfl

import (
	"math"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/methods/fixturetest"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

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

func TestStepFixture(t *testing.T) {
	m := fixturetest.Model(t)
	init, _ := read(t, "../../testdata/promptfl/init.safetensors")
	ref, meta := read(t, "../../testdata/promptfl/step.safetensors")
	// the batch is the step's inputs alone: the image features come from
	// the images, not from the reference's outputs (issue 17, defect 9)
	out, err := StepFromFile(m, init, stepInputs(ref), meta)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"image_features", "text_features", "logits", "loss", "grad." + ParamCtx, "step1." + ParamCtx} {
		rel(t, name, out[name], ref[name], tolFor(name))
	}
	rel(t, "update", update(out["step1."+ParamCtx], init[ParamCtx]), update(ref["step1."+ParamCtx], init[ParamCtx]), 1e-4)
}

// TestWeightDecay checks the decay on its own: one momentum-SGD step with
// weight decay wd differs from the step without by exactly −lr·wd·p.
func TestWeightDecay(t *testing.T) {
	m := fixturetest.Model(t)
	init, _ := read(t, "../../testdata/promptfl/init.safetensors")
	ref, meta := read(t, "../../testdata/promptfl/step.safetensors")
	lr, _ := prompt.MetaFloat(meta, "lr")
	noWD := map[string]string{}
	for k, v := range meta {
		noWD[k] = v
	}
	noWD["weight_decay"] = "0"
	bigWD := map[string]string{}
	for k, v := range meta {
		bigWD[k] = v
	}
	const wd = 0.5 // large, so the decay dominates float rounding
	bigWD["weight_decay"] = "0.5"
	a, err := StepFromFile(m, init, ref, noWD)
	if err != nil {
		t.Fatal(err)
	}
	b, err := StepFromFile(m, init, ref, bigWD)
	if err != nil {
		t.Fatal(err)
	}
	diff := update(b["step1."+ParamCtx], a["step1."+ParamCtx])
	want := init[ParamCtx].Clone()
	for i := range want.Data {
		want.Data[i] *= float32(-lr * wd)
	}
	rel(t, "weight decay", diff, want, 1e-3)
}

func TestRoundFixture(t *testing.T) {
	m := fixturetest.Model(t)
	init, _ := read(t, "../../testdata/promptfl/init.safetensors")
	ref, meta := read(t, "../../testdata/promptfl/round.safetensors")
	out, err := RoundFromFile(m, init, ref, meta)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"client0.batch_losses", "client1.batch_losses", "client0.trained." + ParamCtx, "client1.trained." + ParamCtx, "global." + ParamCtx} {
		rel(t, name, out[name], ref[name], tolFor(name))
		if strings.Contains(name, ParamCtx) {
			rel(t, name+" update", update(out[name], init[ParamCtx]), update(ref[name], init[ParamCtx]), 1e-4)
		}
	}
}

// TestStepFromFileInputs: cached image features stand in for images, and a
// missing setting is named.
func TestStepFromFileInputs(t *testing.T) {
	m := fixturetest.Model(t)
	init, _ := read(t, "../../testdata/promptfl/init.safetensors")
	ref, meta := read(t, "../../testdata/promptfl/step.safetensors")
	batch := tensor.Named{"tokens": ref["tokens"], "labels": ref["labels"], "image_features": ref["image_features"]}
	out, err := StepFromFile(m, init, batch, meta)
	if err != nil {
		t.Fatal(err)
	}
	rel(t, "grad from cached features", out["grad."+ParamCtx], ref["grad."+ParamCtx], 1e-4)
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
