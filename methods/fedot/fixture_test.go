package fedot

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/tensortest"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

func tinyModel() *clip.Model { return clip.New(paritytest.TinyWeights()) }

// Besides the float64 oracle's fixtures (external_test.go), these tests write fixtures in
// the reference layout from a tiny random CLIP (8-d features, 8 px images)
// and check `step` against finite differences and optim.SGD, and `round`
// against the production Plan run by parity.Round.

// initParams draws w_g (unit rows) and the variant's local map, away from
// its identity start so every path of the layers is exercised.
func initParams(rng *rand.Rand, s *Settings, d, K int) tensor.Named {
	p := tensor.Named{}
	shapes := s.Shapes(d, K)
	for _, name := range slices.Sorted(maps.Keys(shapes)) {
		p[name] = paritytest.RandTensor(rng, 0.3, shapes[name]...)
	}
	clip.NormalizeRows(nil, p[ParamClassifier].Data, K, d)
	if w, ok := p[ParamLinear]; ok {
		for i := 0; i < d; i++ {
			w.Data[i*d+i]++
		}
	}
	return p
}

// stepFixture is a step fixture of B images and K classes for settings s.
func stepFixture(t *testing.T, m *clip.Model, s *Settings, B, K int, meta map[string]string, sets ...string) *parity.Fixture {
	rng := rand.New(rand.NewPCG(3, uint64(B*K+s.Blocks)))
	S, d := m.W.Config.Vision.ImageSize, m.W.Config.EmbedDim
	batch := tensor.Named{"images": paritytest.RandTensor(rng, 1, B, 3, S, S)}
	ints := map[string]safetensors.Int64Tensor{"labels": paritytest.Labels(rng, B, K),
		"tokens": {Shape: []int{K, paritytest.TinyCtx}, Data: paritytest.TinyTokens(K)}}
	return paritytest.Write(t, m, "fedot", initParams(rng, s, d, K), batch, ints, meta, sets...)
}

var stepCases = []struct {
	name string
	s    *Settings
	meta map[string]string
}{
	{"fedot", &Settings{Variant: VariantFedOT, Blocks: 1}, nil},
	{"fedot+b", &Settings{Variant: VariantFedOT, Blocks: 4}, nil},
	{"fedot cosine", &Settings{Variant: VariantFedOT, Blocks: 2}, map[string]string{"normalize_classifier": "true"}},
	{"fedlt", &Settings{Variant: VariantFedLT, Blocks: 1}, nil},
	{"fedadapter", &Settings{Variant: VariantFedAdapter, Blocks: 1}, nil},
}

// awayFromKinks sets FedAdapter's down [2, d] to ±½ the mean direction of
// the batch's image features plus small noise: one hidden unit on for every
// image, one off, their pre-activations far from 0, so no ±1e-2 step of a
// finite difference crosses the ReLU's kink (it fails the test when the
// features share no direction to build this on).
func awayFromKinks(t *testing.T, m *clip.Model, f *parity.Fixture, down *tensor.Tensor) {
	d := m.W.Config.EmbedDim
	B := len(f.Ints["labels"])
	img := m.EncodeImage(f.Batch["images"].Data, B)
	u := make([]float32, d)
	for b := 0; b < B; b++ {
		for k := range u {
			u[k] += img[b*d+k]
		}
	}
	clip.NormalizeRows(nil, u, 1, d)
	for b := 0; b < B; b++ {
		var dot, mx float64
		for k := range u {
			dot += float64(u[k]) * float64(img[b*d+k])
			mx = math.Max(mx, math.Abs(float64(img[b*d+k])))
		}
		if dot < 50*1e-2*mx {
			t.Fatalf("image %d: f·u = %.3g, too close to a kink for finite differences", b, dot)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for j := 0; j < down.Shape[0]; j++ {
		sign := float32(1 - 2*(j%2))
		for k := 0; k < d; k++ {
			down.Data[j*d+k] = sign*0.5*u[k] + float32(rng.NormFloat64()*0.05)
		}
	}
}

// TestStepGradients: every grad.<p> of `step` is the central finite
// difference of its loss (eps 1e-2, tolerance 2e-2). τ is lowered to 3:
// with CLIP's 100 a step of 1e-2 in w_g moves the logits by ~1 and the
// difference quotient no longer approximates the derivative. FedAdapter's
// down is set away from the ReLU's kinks (awayFromKinks).
func TestStepGradients(t *testing.T) {
	m := tinyModel()
	for _, tc := range stepCases {
		meta := map[string]string{"lr": "0.1", "tau": "3"}
		for k, v := range tc.meta {
			meta[k] = v
		}
		f := stepFixture(t, m, tc.s, 6, 5, meta)
		if down, ok := f.Params[ParamDown]; ok {
			awayFromKinks(t, m, f, down)
		}
		out, err := Method{}.Step(context.Background(), f)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if l := out["loss"].Data[0]; !(l > 0) {
			t.Fatalf("%s: loss %v", tc.name, l)
		}
		loss := func() float64 { // the step's loss before its rounding to float32
			_, l, err := step(f)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		rng := rand.New(rand.NewPCG(9, 9))
		n := 0
		for _, name := range slices.Sorted(maps.Keys(tc.s.Shapes(8, 5))) {
			g, ok := out["grad."+name]
			if !ok {
				t.Fatalf("%s: no grad.%s", tc.name, name)
			}
			n++
			if err := gradcheck.Check(tc.name+" "+name, f.Params[name].Data, g.Data, loss, 1e-2, 2e-2, 30, rng); err != nil {
				t.Error(err)
			}
		}
		if n < 2 {
			t.Errorf("%s: %d parameters checked", tc.name, n)
		}
	}
}

// TestStepSGD: step1.<p> is p − lr·grad for plain SGD, and what optim.SGD
// gives from the step's gradients with momentum and weight decay (set on
// the command line, over the metadata).
func TestStepSGD(t *testing.T) {
	m := tinyModel()
	for _, tc := range stepCases {
		f := stepFixture(t, m, tc.s, 6, 5, map[string]string{"lr": "0.5"})
		out, err := Method{}.Step(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		for name := range tc.s.Shapes(8, 5) {
			p, g, got := f.Params[name].Data, out["grad."+name].Data, out["step1."+name].Data
			moved := false
			for i := range p {
				want := p[i] - 0.5*g[i]
				if math.Abs(float64(got[i]-want)) > 1e-6*(1+math.Abs(float64(want))) {
					t.Fatalf("%s: step1.%s[%d] = %v, want p − lr·g = %v", tc.name, name, i, got[i], want)
				}
				moved = moved || got[i] != p[i]
			}
			if !moved {
				t.Errorf("%s: step1.%s equals the parameter", tc.name, name)
			}
		}

		f = stepFixture(t, m, tc.s, 6, 5, map[string]string{"lr": "0.5", "momentum": "0"}, "momentum=0.9", "weight_decay=0.01", "lr=0.2")
		out, err = Method{}.Step(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		var ps []optim.Param
		want := tensor.Named{}
		for name := range tc.s.Shapes(8, 5) {
			want[name] = f.Params[name].Clone()
			ps = append(ps, optim.Param{Name: name, Value: want[name].Data, Grad: out["grad."+name].Data})
		}
		if err := optim.NewSGD(0.9, 0.01, false).Step(0.2, ps); err != nil {
			t.Fatal(err)
		}
		for name, w := range want {
			if k := tensortest.BitsDiff(tensor.Named{name: w}, tensor.Named{name: out["step1."+name]}); k != "" {
				t.Errorf("%s: step1.%s differs from optim.SGD (momentum 0.9, wd 0.01, lr 0.2)", tc.name, name)
			}
		}
	}
}

// TestStepOutputs: the features and the local matrix of `step` are what
// the layers give, the local matrix of FedOT is orthogonal and the
// logits' softmax gives the loss.
func TestStepOutputs(t *testing.T) {
	m := tinyModel()
	s := &Settings{Variant: VariantFedOT, Blocks: 2}
	f := stepFixture(t, m, s, 6, 5, map[string]string{"lr": "0.1"})
	out, err := Method{}.Step(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	d, B, K := 8, 6, 5
	img := m.EncodeImage(f.Batch["images"].Data, B)
	if k := tensortest.BitsDiff(tensor.Named{"f": out["image_features"]}, tensor.Named{"f": {Shape: []int{B, d}, Data: img}}); k != "" {
		t.Error("image_features differ from the frozen encoder's")
	}
	w1 := out["w_1"].Data
	if e := orthogonalityError(w1, d); e > 1e-5 {
		t.Errorf("w_1: max|WᵀW − I| = %.3g", e)
	}
	hp := out["transformed_features"].Data
	for b := 0; b < B; b++ {
		for i := 0; i < d; i++ {
			var v float64
			for k := 0; k < d; k++ {
				v += float64(w1[i*d+k]) * float64(img[b*d+k])
			}
			if math.Abs(v-float64(hp[b*d+i])) > 1e-5 {
				t.Fatalf("transformed_features[%d,%d] = %v, want (W h) %v", b, i, hp[b*d+i], v)
			}
		}
	}
	// τ is exp(logit_scale) of the model: the loss is the logits' cross entropy
	logits, labels := out["logits"].Data, f.Ints["labels"]
	var ce float64
	for b := 0; b < B; b++ {
		row := logits[b*K : (b+1)*K]
		var z float64
		for _, v := range row {
			z += math.Exp(float64(v))
		}
		ce += math.Log(z) - float64(row[labels[b]])
	}
	if got := float64(out["loss"].Data[0]); math.Abs(got-ce/float64(B)) > 1e-4*(1+got) {
		t.Errorf("loss %v, cross entropy of the logits %v", got, ce/float64(B))
	}
	scale := math.Exp(float64(m.W.LogitScale))
	var mx float64
	for _, v := range logits {
		mx = math.Max(mx, math.Abs(float64(v)))
	}
	if mx > scale*(1+1e-5) || mx < scale/20 {
		t.Errorf("max|logit| %v for τ %v (unit w_g rows)", mx, scale)
	}
}

// TestSettingsFromFixture: variants and blocks from the parameters, τ
// from tau or logit_scale, and errors naming what is wrong.
func TestSettingsFromFixture(t *testing.T) {
	m := tinyModel()
	for _, tc := range stepCases {
		f := stepFixture(t, m, tc.s, 2, 3, map[string]string{"logit_scale": "1.5", "lr": "0.1"})
		sec, err := Method{}.SettingsFrom(f)
		if err != nil {
			t.Fatal(err)
		}
		s := sec.(*Settings)
		if s.Variant != tc.s.Variant || s.Blocks != tc.s.Blocks || math.Abs(s.Tau-math.Exp(1.5)) > 1e-12 {
			t.Errorf("%s: settings %+v", tc.name, s)
		}
	}
	f := stepFixture(t, m, &Settings{Variant: VariantFedOT, Blocks: 2}, 2, 3, map[string]string{"lr": "0.1", "tau": "7"}, "variant=all_global")
	sec, err := Method{}.SettingsFrom(f)
	if err != nil {
		t.Fatal(err)
	}
	if s := sec.(*Settings); s.Variant != VariantAllGlobal || s.Tau != 7 || s.Blocks != 2 {
		t.Errorf("settings %+v", s)
	}
	for _, tc := range []struct {
		sets []string
		mod  func(*parity.Fixture)
		want string
	}{
		{[]string{"blocks=4"}, nil, "blocks"},
		{[]string{"variant=fedx"}, nil, "variant"},
		{[]string{"tau=-1"}, nil, "τ"},
		{nil, func(f *parity.Fixture) { delete(f.Params, ParamX) }, ParamX},
		{nil, func(f *parity.Fixture) { f.Ints["labels"][1] = 3 }, "label 3"},
		{nil, func(f *parity.Fixture) { delete(f.Params, ParamClassifier) }, ParamClassifier},
		{nil, func(f *parity.Fixture) { f.Ints["tokens"] = f.Ints["tokens"][:paritytest.TinyCtx] }, "tokens"},
		{nil, func(f *parity.Fixture) { delete(f.Batch, "images") }, "images"},
		{nil, func(f *parity.Fixture) { delete(f.Meta, "lr") }, "lr"},
	} {
		f := stepFixture(t, m, &Settings{Variant: VariantFedOT, Blocks: 2}, 2, 3, map[string]string{"lr": "0.1"}, tc.sets...)
		if tc.mod != nil {
			tc.mod(f)
		}
		if _, err := (Method{}).Step(context.Background(), f); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %q", tc.sets, err, tc.want)
		}
	}
}

// roundFixture is a round fixture of 3 clients with 5, 7 and 4 images.
func roundFixture(t *testing.T, m *clip.Model, s *Settings, K int, sets ...string) *parity.Fixture {
	rng := rand.New(rand.NewPCG(4, uint64(s.Blocks)))
	S, d := m.W.Config.Vision.ImageSize, m.W.Config.EmbedDim
	batch := tensor.Named{}
	ints := map[string]safetensors.Int64Tensor{"tokens": {Shape: []int{K, paritytest.TinyCtx}, Data: paritytest.TinyTokens(K)}}
	for i, n := range []int{5, 7, 4} {
		batch[fmt.Sprintf("client%d.images", i)] = paritytest.RandTensor(rng, 1, n, 3, S, S)
		ints[fmt.Sprintf("client%d.labels", i)] = paritytest.Labels(rng, n, K)
	}
	meta := map[string]string{"lr": "0.05", "momentum": "0.9", "weight_decay": "5e-4", "batch_size": "3", "local_epochs": "2", "tau": "10"}
	return paritytest.Write(t, m, "fedot", initParams(rng, s, d, K), batch, ints, meta, sets...)
}

// TestFixtureRound: `round` is the production Plan's round (parity.Round
// on the same inputs) bit for bit; the server's w_g is the uniform mean of
// the clients' trained w_g (all_global: x too); the clients' transforms
// stay orthogonal.
func TestFixtureRound(t *testing.T) {
	m := tinyModel()
	ctx := context.Background()
	for _, tc := range []struct {
		s    *Settings
		sets []string
	}{
		{&Settings{Variant: VariantFedOT, Blocks: 1}, nil},
		{&Settings{Variant: VariantFedOT, Blocks: 2}, []string{"variant=all_global"}},
		{&Settings{Variant: VariantFedLT, Blocks: 1}, nil},
	} {
		f := roundFixture(t, m, tc.s, 4, tc.sets...)
		out, err := parity.RunRound(ctx, Method{}, f)
		if err != nil {
			t.Fatal(err)
		}
		sec, err := Method{}.SettingsFrom(f)
		if err != nil {
			t.Fatal(err)
		}
		s := sec.(*Settings)
		opts, err := f.TrainOptions()
		if err != nil {
			t.Fatal(err)
		}
		in := parity.RoundInputs{Model: m, Init: f.Params, Tokens: f.Ints["tokens"], Classes: 4, Train: opts}
		for i := 0; i < 3; i++ {
			in.Clients = append(in.Clients, parity.TensorClient{Pixels: f.Batch[fmt.Sprintf("client%d.images", i)].Data,
				Labels: f.Ints[fmt.Sprintf("client%d.labels", i)]})
		}
		ref, err := parity.Round(ctx, Method{}, s, in)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			delete(ref, fmt.Sprintf("client%d.trained.%s", i, SiteClasses))
		}
		if k := tensortest.BitsDiff(out, ref); k != "" {
			t.Errorf("%s: round differs from parity.Round at %s", s.Variant, k)
		}
		shared := []string{ParamClassifier}
		if s.Variant == VariantAllGlobal {
			shared = append(shared, ParamX)
		}
		if len(out) != 3*len(s.Shapes(8, 4))+len(shared) {
			t.Errorf("%s: %d tensors in the round's output", s.Variant, len(out))
		}
		for _, name := range shared {
			g, ok := out["global."+name]
			if !ok {
				t.Fatalf("%s: no global.%s", s.Variant, name)
			}
			for j := range g.Data {
				var acc float64
				for i := 0; i < 3; i++ {
					acc += float64(out[fmt.Sprintf("client%d.trained.%s", i, name)].Data[j]) / 3
				}
				if math.Abs(acc-float64(g.Data[j])) > 1e-7*(1+math.Abs(acc)) {
					t.Fatalf("%s: global.%s[%d] = %v, mean of the clients' %v", s.Variant, name, j, g.Data[j], acc)
				}
			}
		}
		for i := 0; i < 3; i++ {
			for name := range s.Shapes(8, 4) {
				tr, init := out[fmt.Sprintf("client%d.trained.%s", i, name)], f.Params[name]
				if tr == nil || tensortest.BitsDiff(tensor.Named{name: tr}, tensor.Named{name: init}) == "" {
					t.Errorf("%s: client %d's %s missing or untrained", s.Variant, i, name)
				}
			}
			x, ok := out[fmt.Sprintf("client%d.trained.%s", i, ParamX)]
			if !ok {
				continue
			}
			c, err := NewCayley(8, s.Blocks)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Factor(x.Data); err != nil {
				t.Fatal(err)
			}
			w := make([]float32, 64)
			if err := c.Matrix(w); err != nil {
				t.Fatal(err)
			}
			if e := orthogonalityError(w, 8); e > 1e-5 {
				t.Errorf("%s: client %d's trained w_1: max|WᵀW − I| = %.3g", s.Variant, i, e)
			}
		}
		if s.Variant == VariantFedOT {
			if _, ok := out["global."+ParamX]; ok {
				t.Error("fedot: the server holds x")
			}
		}
	}
}
