package fedmvp

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

const td = "../../testdata/fedmvp/"

func tinyModel(t testing.TB) *clip.Model {
	t.Helper()
	w, _, err := checkpoint.Load("../../testdata/clip-tiny/openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	return clip.New(w)
}

// rel checks the scale-relative error max|Δ| / max|ref|.
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

// compare checks every float output of the reference file: forward values
// to 1e-5, gradients and parameters to 1e-4 of their scale, and each
// parameter's update p − init to 1e-4 of the largest update (plus one
// float32 spacing of max|p|). It returns how many were compared.
func compare(t *testing.T, f *parity.Fixture, out tensor.Named, want tensor.Named, outputs []string) int {
	t.Helper()
	n := 0
	for _, name := range outputs {
		w := want[name]
		tol := 1e-5
		if strings.HasPrefix(name, "grad.") || strings.HasPrefix(name, "step1.") {
			tol = 1e-4
		}
		rel(t, name, out[name], w, tol)
		n++
		if p, ok := strings.CutPrefix(name, "step1."); ok {
			p0 := f.Params[p]
			var maxU, maxD float64
			var maxP float32
			for i := range w.Data {
				u := float64(w.Data[i] - p0.Data[i])
				maxU = math.Max(maxU, math.Abs(u))
				maxD = math.Max(maxD, math.Abs(float64(out[name].Data[i]-p0.Data[i])-u))
				maxP = max(maxP, float32(math.Abs(float64(w.Data[i]))))
			}
			spacing := float64(math.Nextafter32(maxP, float32(math.Inf(1))) - maxP)
			if !(maxD <= 1e-4*maxU+spacing) || maxU == 0 {
				t.Errorf("%s update: max|Δ| %.3g (max|update| %.3g)", name, maxD, maxU)
			}
		}
	}
	return n
}

// floatOutputs lists the reference file's float tensors other than inputs.
func floatOutputs(f *parity.Fixture) []string {
	var out []string
	for name := range f.Batch {
		if name != "images" {
			out = append(out, name)
		}
	}
	return out
}

// TestFixtureSteps replays testdata/fedmvp's steps (the authors'
// FedMVP.forward, forward_backward and their SGD on clip-tiny) with the
// method's Step: the description features, the PromptFormer's textfeat_ctx
// and pooled visual prompts, the prompted and zero-shot image features,
// logits, both loss terms, every trained tensor's gradient and one SGD step
// — before the LoRA switch (cross-attention and linear map trained,
// consistency target flipped) and after it (LoRA factors and linear map,
// unflipped).
func TestFixtureSteps(t *testing.T) {
	m := tinyModel(t)
	for _, c := range [][2]string{{"init", "step"}, {"init_lora", "step_lora"}} {
		t.Run(c[1], func(t *testing.T) {
			f, err := parity.Load(m, td+c[0]+".safetensors", []string{td + c[1] + ".safetensors"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			out, err := Method{}.Step(context.Background(), f)
			if err != nil {
				t.Fatal(err)
			}
			outputs := floatOutputs(f)
			grads := 0
			for _, name := range outputs {
				if strings.HasPrefix(name, "grad.") {
					grads++
				}
			}
			if n := compare(t, f, out, f.Batch, outputs); n < 20 || grads < 8 {
				t.Fatalf("only %d outputs (%d gradients) compared", n, grads)
			}
		})
	}
}

// TestFixtureRound replays testdata/fedmvp/round.safetensors (two
// clients of 8 and 4 images from init, each the authors' Client.train on
// one batch, server.py's uniform mean) through the production path:
// FedMVP's promptfed clients on methods.Embeddings records, its strategy
// and the coordinator. Every trained tensor of both sites and every global
// one agrees, with its update from init.
func TestFixtureRound(t *testing.T) {
	m := tinyModel(t)
	f, err := parity.Load(m, td+"init.safetensors", []string{td + "round.safetensors"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := parity.RunRound(context.Background(), Method{}, f)
	if err != nil {
		t.Fatal(err)
	}
	var outputs []string
	for _, name := range floatOutputs(f) {
		if strings.Contains(name, ".trained.") || strings.HasPrefix(name, "global.") {
			outputs = append(outputs, name)
		}
	}
	n := 0
	for _, name := range outputs {
		p := name[strings.Index(name, "prompt_learner."):]
		// one SGD step per client: compare as a step from init
		rel(t, name, out[name], f.Batch[name], 1e-4)
		w, p0 := f.Batch[name], f.Params[p]
		var maxU, maxD float64
		for i := range w.Data {
			u := float64(w.Data[i] - p0.Data[i])
			maxU = math.Max(maxU, math.Abs(u))
			maxD = math.Max(maxD, math.Abs(float64(out[name].Data[i]-p0.Data[i])-u))
		}
		if !(maxD <= 1e-4*maxU+3*float64(math.Nextafter32(float32(maxAbs(w.Data)), float32(math.Inf(1)))-float32(maxAbs(w.Data)))) || maxU == 0 {
			t.Errorf("%s update: max|Δ| %.3g (max|update| %.3g)", name, maxD, maxU)
		}
		n++
	}
	if n < 45 {
		t.Fatalf("only %d outputs compared", n)
	}
}

func maxAbs(v []float32) float64 {
	var m float64
	for _, x := range v {
		m = math.Max(m, math.Abs(float64(x)))
	}
	return m
}
