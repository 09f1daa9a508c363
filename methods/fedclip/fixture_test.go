package fedclip

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/tensortest"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/tensor"
)

// The fixtures of testdata/fedclip (PMFLT's FedCLIP on the tiny CLIP; tolerances
// of testdata/README.md, "fedclip/: tolerances" = promptfl's: scale-relative
// per tensor, rel = max|Δ|/max|ref|, ≤ 1e-5 for the forward, ≤ 1e-4 for
// gradients, steps and updates p − init).

const (
	tolForward = 1e-5
	tolGrad    = 1e-4
)

// loadStep loads init + step as `pfedmma step` does, with sets.
func loadStep(t *testing.T, sets ...string) *parity.Fixture {
	t.Helper()
	td := paritytest.Testdata + "fedclip/"
	f, err := parity.Load(paritytest.Model(t), td+"init.safetensors", []string{td + "step.safetensors"}, sets)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestFixtureStep: every tensor of step.safetensors — the features, the
// attention, the [B, B] logits, both loss terms, every gradient and the
// parameters after one SGD step (and their update p − init).
func TestFixtureStep(t *testing.T) {
	f := loadStep(t)
	out, err := Method{}.Step(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	ref := f.Batch
	for _, name := range []string{"image_features", "adapter_attention", "text_features", "logits", "loss", "loss_img", "loss_txt"} {
		if out[name] == nil || ref[name] == nil {
			t.Fatalf("%s missing (ours %v, fixture %v)", name, out[name] != nil, ref[name] != nil)
		}
		paritytest.Close(t, name, out[name].Data, ref[name].Data, tolForward)
	}
	for _, n := range Names {
		paritytest.Close(t, "grad."+n, out["grad."+n].Data, ref["grad."+n].Data, tolGrad)
		paritytest.Close(t, "step1."+n, out["step1."+n].Data, ref["step1."+n].Data, tolGrad)
		init, got, want := f.Params[n].Data, out["step1."+n].Data, ref["step1."+n].Data
		du, dw := make([]float32, len(init)), make([]float32, len(init))
		for i := range init {
			du[i], dw[i] = got[i]-init[i], want[i]-init[i]
		}
		paritytest.Close(t, "step1."+n+" (update)", du, dw, tolGrad)
	}
	// the two terms make the loss; the repeated label (1) keeps it above 0
	if l := out["loss"].Data[0]; math.Abs(float64(l-(out["loss_img"].Data[0]+out["loss_txt"].Data[0])/2)) > 1e-6 || l <= 0 {
		t.Errorf("loss %v is not the mean of %v and %v", l, out["loss_img"].Data[0], out["loss_txt"].Data[0])
	}
}

// TestFixtureStepFromFeatures: given the fixture's image_features instead
// of images, the step reproduces the fixture too, from those features.
func TestFixtureStepFromFeatures(t *testing.T) {
	f := loadStep(t)
	delete(f.Batch, "images")
	got, err := Method{}.Step(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	if d := tensortest.BitsDiff(tensor.Named{"f": got["image_features"]}, tensor.Named{"f": f.Batch["image_features"]}); d != "" {
		t.Error("the step did not use the given image_features")
	}
	paritytest.Close(t, "logits", got["logits"].Data, f.Batch["logits"].Data, tolForward)
	for _, n := range Names {
		paritytest.Close(t, "grad."+n, got["grad."+n].Data, f.Batch["grad."+n].Data, tolGrad)
	}
}

// TestFixtureRound: every client's trained adapter, the global one (and
// their updates from init) and every batch loss of round.safetensors,
// through parity.RunRound (the production Plan, Sites, Coordinator).
func TestFixtureRound(t *testing.T) {
	out := paritytest.Round(t, Method{}, "fedclip/init.safetensors", []string{"fedclip/round.safetensors"}, nil,
		"fedclip/round.safetensors", tolGrad)
	ref, err := parity.Load(paritytest.Model(t), paritytest.Testdata+"fedclip/round.safetensors", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for name, w := range ref.Params {
		if strings.HasSuffix(name, ".batch_losses") {
			g, ok := out[name]
			if !ok {
				t.Fatalf("round produced no %s", name)
			}
			paritytest.Close(t, name, g.Data, w.Data, tolForward)
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d batch-loss tensors compared, want 2", n)
	}
	if len(out) != 3*4+2 {
		t.Errorf("%d tensors in the round's output, want 2 clients' and the server's 4 tensors and 2 loss lists", len(out))
	}
}

// TestFixtureRoundIsFedAvg: global = Σ n_i/n · trained_i for every tensor,
// and parity.Round's production sites hold the adapter they trained (the
// global one reaches them with the round's evaluation instruction:
// TestEvaluateReceivesGlobal).
func TestFixtureRoundIsFedAvg(t *testing.T) {
	td := paritytest.Testdata + "fedclip/"
	f, err := parity.Load(paritytest.Model(t), td+"init.safetensors", []string{td + "round.safetensors"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := parity.RunRound(context.Background(), Method{}, f)
	if err != nil {
		t.Fatal(err)
	}
	sizes := []float64{8, 4}
	for _, name := range Names {
		g := out["global."+name]
		for j := range g.Data {
			var acc float64
			for i, n := range sizes {
				acc += n / 12 * float64(out[fmt.Sprintf("client%d.trained.%s", i, name)].Data[j])
			}
			if math.Abs(acc-float64(g.Data[j])) > 1e-7*(1+math.Abs(acc)) {
				t.Fatalf("global.%s[%d] = %v, FedAvg of the clients' %v", name, j, g.Data[j], acc)
			}
		}
	}
	sec, err := Method{}.SettingsFrom(f)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := f.TrainOptions()
	if err != nil {
		t.Fatal(err)
	}
	in := parity.RoundInputs{Model: f.Model, Init: f.Params, Tokens: f.Ints["tokens"], Classes: 5, Train: opts}
	for i := range sizes {
		in.Clients = append(in.Clients, parity.TensorClient{Pixels: f.Batch[fmt.Sprintf("client%d.images", i)].Data,
			Labels: f.Ints[fmt.Sprintf("client%d.labels", i)]})
	}
	prod, err := parity.Round(context.Background(), Method{}, sec, in)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range Names {
		if d := tensortest.BitsDiff(tensor.Named{name: prod["global."+name]}, tensor.Named{name: out["global."+name]}); d != "" {
			t.Errorf("global.%s: parity.Round differs from the fixture round", name)
		}
		for i := range sizes {
			key := fmt.Sprintf("client%d.trained.%s", i, name)
			if d := tensortest.BitsDiff(tensor.Named{name: prod[key]}, tensor.Named{name: out[key]}); d != "" {
				t.Errorf("parity.Round: site %d holds another %s than the one it trained", i, name)
			}
		}
	}
}

// TestFixtureStepGradients: grad.<p> of `step` is the central finite
// difference of its loss (in float64 before rounding), on the fixture's
// images with the adapter scaled up so that the attention is far from
// uniform.
func TestFixtureStepGradients(t *testing.T) {
	f := loadStep(t)
	for _, n := range []string{ParamW1, ParamW2} {
		for i := range f.Params[n].Data {
			f.Params[n].Data[i] *= 8
		}
	}
	out, err := Method{}.Step(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	loss := func() float64 {
		_, l, err := step(f)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range Names {
		if err := gradcheck.Check(n, f.Params[n].Data, out["grad."+n].Data, loss, 1e-2, 2e-2, 40, rng); err != nil {
			t.Error(err)
		}
	}
}

// TestFixtureStepOptimizer: step1 is what optim.SGD gives from the step's
// gradients with the command line's momentum, weight decay and lr.
func TestFixtureStepOptimizer(t *testing.T) {
	f := loadStep(t, "lr=0.3", "momentum=0.5", "weight_decay=0.01")
	out, err := Method{}.Step(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	want := tensor.Named{}
	var ps []optim.Param
	for _, n := range Names {
		want[n] = f.Params[n].Clone()
		ps = append(ps, optim.Param{Name: n, Value: want[n].Data, Grad: out["grad."+n].Data})
	}
	if err := optim.NewSGD(0.5, 0.01, false).Step(0.3, ps); err != nil {
		t.Fatal(err)
	}
	for _, n := range Names {
		if d := tensortest.BitsDiff(tensor.Named{n: want[n]}, tensor.Named{n: out["step1."+n]}); d != "" {
			t.Errorf("step1.%s differs from optim.SGD (lr 0.3, momentum 0.5, wd 0.01)", n)
		}
		if d := tensortest.BitsDiff(tensor.Named{n: f.Params[n]}, tensor.Named{n: out["step1."+n]}); d == "" {
			t.Errorf("step1.%s did not move", n)
		}
	}
}

// TestFixtureRejects: inputs that do not fit are errors naming the problem.
func TestFixtureRejects(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		mod  func(*parity.Fixture)
		want string
	}{
		{[]string{"logit_scale=1"}, nil, "logit_scale"},
		{[]string{"feature_dim=512"}, nil, "feature_dim"},
		{[]string{"lr=-1"}, nil, "lr"},
		{nil, func(f *parity.Fixture) { delete(f.Params, ParamB2) }, ParamB2},
		{nil, func(f *parity.Fixture) { f.Params[ParamW1] = tensor.New(64, 32) }, ParamW1},
		{nil, func(f *parity.Fixture) { f.Ints["labels"][1] = 5 }, "label 5"},
		{nil, func(f *parity.Fixture) { delete(f.Ints, "tokens") }, "tokens"},
		{nil, func(f *parity.Fixture) { f.Ints["tokens"] = f.Ints["tokens"][:5] }, "tokens"},
		{nil, func(f *parity.Fixture) { delete(f.Batch, "images") }, "images"},
		{nil, func(f *parity.Fixture) { f.Batch["images"] = tensor.New(2, 3, 32, 32) }, "images"},
		{nil, func(f *parity.Fixture) { delete(f.Meta, "lr") }, "lr"},
	} {
		f := loadStep(t, tc.sets...)
		if tc.mod != nil {
			tc.mod(f)
		}
		if tc.want == "images" {
			delete(f.Batch, "image_features")
		}
		if _, err := (Method{}).Step(context.Background(), f); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %q", tc.sets, err, tc.want)
		}
	}
}
