package clipadapter

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/tensortest"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

// tinyModel is fixturetest's tiny CLIP with logit multiplier scale.
func tinyModel(scale float64) *clip.Model {
	w := paritytest.TinyWeights()
	w.LogitScale = float32(math.Log(scale))
	return clip.New(w)
}

// Besides the authors' fixtures (external_test.go), these tests
// write fixtures in the reference layout from a tiny random CLIP (8-d
// features, 8 px images) and check `step` against finite differences and
// optim.SGD, and `round` against the production Plan run by parity.Round.

// initParams draws the adapter (W1 [d/r, d], W2 [d, d/r]) in a fixed order.
func initParams(rng *rand.Rand, d, r int) tensor.Named {
	k := d / r
	return tensor.Named{ParamW1: paritytest.RandTensor(rng, 0.5, k, d), ParamW2: paritytest.RandTensor(rng, 0.5, d, k)}
}

// stepFixture is a step fixture of B images and C classes, reduction r.
func stepFixture(t *testing.T, m *clip.Model, B, C, r int, meta map[string]string, sets ...string) *parity.Fixture {
	rng := rand.New(rand.NewPCG(3, uint64(B*C+r)))
	S, d := m.W.Config.Vision.ImageSize, m.W.Config.EmbedDim
	batch := tensor.Named{"images": paritytest.RandTensor(rng, 1, B, 3, S, S)}
	ints := map[string]safetensors.Int64Tensor{"labels": paritytest.Labels(rng, B, C),
		"tokens": {Shape: []int{C, paritytest.TinyCtx}, Data: paritytest.TinyTokens(C)}}
	return paritytest.Write(t, m, "clip_adapter", initParams(rng, d, r), batch, ints, meta, sets...)
}

// awayFromKinks sets the adapter so that no ±1e-2 step of a finite
// difference crosses a ReLU's kink: W1's rows alternate ±½ the mean
// direction u of the batch's features plus small noise (each hidden unit
// on or off for every image, |pre-activation| ≥ ½ min_b |f_b·u|), and W2's
// entries on the live units are at least 0.3 in magnitude, of either sign
// (each output on or off). It fails the test when the features share no
// direction to build this on.
func awayFromKinks(t *testing.T, m *clip.Model, f *parity.Fixture) {
	liveUnits(t, m, f.Params, f.Batch["images"].Data, len(f.Ints["labels"]))
}

// liveUnits sets the adapter p as awayFromKinks does for B images.
func liveUnits(t *testing.T, m *clip.Model, p tensor.Named, images []float32, B int) {
	d := m.W.Config.EmbedDim
	img := m.EncodeImage(images, B)
	u := make([]float32, d)
	for b := 0; b < B; b++ {
		for k := range u {
			u[k] += img[b*d+k]
		}
	}
	clip.NormalizeRows(nil, u, 1, d)
	margin, maxAbs := math.Inf(1), 0.0
	for b := 0; b < B; b++ {
		var dot float64
		for k := range u {
			dot += float64(u[k]) * float64(img[b*d+k])
			maxAbs = math.Max(maxAbs, math.Abs(float64(img[b*d+k])))
		}
		margin = math.Min(margin, dot)
	}
	if margin < 50*1e-2*maxAbs {
		t.Fatalf("image features share too little direction (min f·u %.3g) for kink-free finite differences", margin)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	w1, w2 := p[ParamW1], p[ParamW2]
	k := w1.Shape[0]
	for j := 0; j < k; j++ {
		sign := float32(1 - 2*(j%2))
		for i := 0; i < d; i++ {
			w1.Data[j*d+i] = sign*0.5*u[i] + float32(rng.NormFloat64()*0.02)
		}
	}
	for i := 0; i < d; i++ {
		for j := 0; j < k; j += 2 {
			v := 0.3 + math.Abs(rng.NormFloat64())*0.3
			if rng.IntN(2) == 0 {
				v = -v
			}
			w2.Data[i*k+j] = float32(v)
		}
	}
}

// TestStepGradients: every grad.<p> of `step` is the central finite
// difference of its loss (eps 1e-2, tolerance 2e-2), with the adapter set
// away from the ReLUs' kinks (awayFromKinks); the logit multiplier is 5,
// not CLIP's 100, so that a step of 1e-2 keeps the loss near-quadratic.
func TestStepGradients(t *testing.T) {
	m := tinyModel(5)
	for _, tc := range []struct {
		r     int
		ratio string
	}{{4, "0.2"}, {2, "0.6"}} {
		f := stepFixture(t, m, 6, 5, tc.r, map[string]string{"lr": "0.1", "ratio": tc.ratio})
		awayFromKinks(t, m, f)
		out, err := Method{}.Step(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		loss := func() float64 { // the step's loss before its rounding to float32
			_, l, err := step(f)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		rng := rand.New(rand.NewPCG(9, 9))
		for _, name := range []string{ParamW1, ParamW2} {
			g := out["grad."+name]
			var mx float32
			for _, v := range g.Data {
				mx = max(mx, float32(math.Abs(float64(v))))
			}
			if mx == 0 {
				t.Errorf("r=%d: grad.%s is zero", tc.r, name)
			}
			if err := gradcheck.Check(fmt.Sprintf("r=%d %s", tc.r, name), f.Params[name].Data, g.Data, loss, 1e-2, 2e-2, 40, rng); err != nil {
				t.Error(err)
			}
		}
	}
}

// TestStepSGD: step1.<p> is p − lr·grad for plain SGD, and what optim.SGD
// gives from the step's gradients with momentum and weight decay (set on
// the command line, over the metadata).
func TestStepSGD(t *testing.T) {
	m := tinyModel(100)
	f := stepFixture(t, m, 6, 5, 4, map[string]string{"lr": "0.5"})
	awayFromKinks(t, m, f) // a live hidden unit: a nonzero gradient
	out, err := Method{}.Step(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{ParamW1, ParamW2} {
		p, g, got := f.Params[name].Data, out["grad."+name].Data, out["step1."+name].Data
		moved := false
		for i := range p {
			want := p[i] - 0.5*g[i]
			if math.Abs(float64(got[i]-want)) > 1e-6*(1+math.Abs(float64(want))) {
				t.Fatalf("step1.%s[%d] = %v, want p − lr·g = %v", name, i, got[i], want)
			}
			moved = moved || got[i] != p[i]
		}
		if !moved {
			t.Errorf("step1.%s equals the parameter", name)
		}
	}
	f = stepFixture(t, m, 6, 5, 4, map[string]string{"lr": "0.5", "momentum": "0"}, "momentum=0.9", "weight_decay=0.01", "lr=0.2")
	awayFromKinks(t, m, f)
	out, err = Method{}.Step(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	want := tensor.Named{}
	var ps []optim.Param
	for _, name := range []string{ParamW1, ParamW2} {
		want[name] = f.Params[name].Clone()
		ps = append(ps, optim.Param{Name: name, Value: want[name].Data, Grad: out["grad."+name].Data})
	}
	if err := optim.NewSGD(0.9, 0.01, false).Step(0.2, ps); err != nil {
		t.Fatal(err)
	}
	for name, w := range want {
		if tensortest.BitsDiff(tensor.Named{name: w}, tensor.Named{name: out["step1."+name]}) != "" {
			t.Errorf("step1.%s differs from optim.SGD (momentum 0.9, wd 0.01, lr 0.2)", name)
		}
	}
}

// TestStepOutputs: the features of `step` are the frozen encoders' and the
// adapter's, and the logits are exp(logit_scale)·cos of them.
func TestStepOutputs(t *testing.T) {
	m := tinyModel(100)
	const B, C, d = 6, 5, 8
	f := stepFixture(t, m, B, C, 4, map[string]string{"lr": "0.1", "ratio": "0.3", "logit_scale": fmt.Sprint(math.Log(100))})
	awayFromKinks(t, m, f) // live units: f' ≠ 0.7·f
	out, err := Method{}.Step(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	img := m.EncodeImage(f.Batch["images"].Data, B)
	txt, err := m.EncodeText(f.Ints["tokens"], C)
	if err != nil {
		t.Fatal(err)
	}
	if tensortest.BitsDiff(tensor.Named{"f": out["image_features"], "t": out["text_features"]},
		tensor.Named{"f": {Shape: []int{B, d}, Data: img}, "t": {Shape: []int{C, d}, Data: txt}}) != "" {
		t.Error("image or text features differ from the frozen encoders'")
	}
	// f' = 0.3·ReLU(ReLU(f W1ᵀ) W2ᵀ) + 0.7·f
	w1, w2, fp := f.Params[ParamW1].Data, f.Params[ParamW2].Data, out["adapted_features"].Data
	const k = d / 4
	for b := 0; b < B; b++ {
		z := make([]float64, k)
		for j := range z {
			for i := 0; i < d; i++ {
				z[j] += float64(img[b*d+i]) * float64(w1[j*d+i])
			}
			z[j] = max(z[j], 0)
		}
		for i := 0; i < d; i++ {
			var a float64
			for j := range z {
				a += z[j] * float64(w2[i*k+j])
			}
			want := 0.3*max(a, 0) + 0.7*float64(img[b*d+i])
			if math.Abs(want-float64(fp[b*d+i])) > 1e-5*(1+math.Abs(want)) {
				t.Fatalf("adapted_features[%d,%d] = %v, want %v", b, i, fp[b*d+i], want)
			}
		}
	}
	want := clip.Logits(fp, txt, B, C, d, m.W.LogitScale)
	if tensortest.BitsDiff(tensor.Named{"l": out["logits"]}, tensor.Named{"l": {Shape: []int{B, C}, Data: want}}) != "" {
		t.Error("logits differ from exp(logit_scale)·cos(f', text features)")
	}
	var ce float64
	for b, y := range f.Ints["labels"] {
		var z float64
		for _, v := range want[b*C : (b+1)*C] {
			z += math.Exp(float64(v))
		}
		ce += math.Log(z) - float64(want[b*C+y])
	}
	if got := float64(out["loss"].Data[0]); math.Abs(got-ce/B) > 1e-4*(1+got) {
		t.Errorf("loss %v, cross entropy of the logits %v", got, ce/B)
	}
}

// TestSettingsFromFixture: reduction from W1's shape, ratio from the
// metadata, and errors naming what is wrong.
func TestSettingsFromFixture(t *testing.T) {
	m := tinyModel(100)
	for _, r := range []int{1, 2, 4, 8} {
		f := stepFixture(t, m, 2, 3, r, map[string]string{"lr": "0.1", "ratio": "0.35"})
		sec, err := Method{}.SettingsFrom(f)
		if err != nil {
			t.Fatal(err)
		}
		if s := sec.(*Settings); s.Reduction != r || s.Ratio != 0.35 {
			t.Errorf("reduction %d: settings %+v", r, s)
		}
	}
	f := stepFixture(t, m, 2, 3, 4, map[string]string{"lr": "0.1"})
	if sec, err := (Method{}).SettingsFrom(f); err != nil || sec.(*Settings).Ratio != 0.2 {
		t.Errorf("no ratio in the metadata: %v, %v (want CLIP-Adapter's 0.2)", sec, err)
	}
	for _, tc := range []struct {
		sets []string
		mod  func(*parity.Fixture)
		want string
	}{
		{[]string{"reduction=2"}, nil, "reduction"},
		{[]string{"ratio=1.5"}, nil, "ratio"},
		{[]string{"logit_scale=1"}, nil, "logit_scale"},
		{nil, func(f *parity.Fixture) { delete(f.Params, ParamW1) }, ParamW1},
		{nil, func(f *parity.Fixture) { f.Params[ParamW2] = tensor.New(3, 3) }, ParamW2},
		{nil, func(f *parity.Fixture) { f.Ints["labels"][1] = 3 }, "label 3"},
		{nil, func(f *parity.Fixture) { delete(f.Ints, "tokens") }, "tokens"},
		{nil, func(f *parity.Fixture) { f.Ints["tokens"] = f.Ints["tokens"][:5] }, "tokens"},
		{nil, func(f *parity.Fixture) { delete(f.Batch, "images") }, "images"},
		{nil, func(f *parity.Fixture) { delete(f.Meta, "lr") }, "lr"},
	} {
		f := stepFixture(t, m, 2, 3, 4, map[string]string{"lr": "0.1"}, tc.sets...)
		if tc.mod != nil {
			tc.mod(f)
		}
		if _, err := (Method{}).Step(context.Background(), f); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %q", tc.sets, err, tc.want)
		}
	}
}

// TestFixtureRound: `round` is the production Plan's round (parity.Round
// on the same inputs): the server's adapter bit for bit, and it is the
// FedAvg (weights n_i) of the clients' trained adapters the round reports.
func TestFixtureRound(t *testing.T) {
	m := tinyModel(100)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(4, 4))
	const C = 4
	S, d := m.W.Config.Vision.ImageSize, m.W.Config.EmbedDim
	sizes := []int{5, 7, 4}
	batch := tensor.Named{}
	ints := map[string]safetensors.Int64Tensor{"tokens": {Shape: []int{C, paritytest.TinyCtx}, Data: paritytest.TinyTokens(C)}}
	for i, n := range sizes {
		batch[fmt.Sprintf("client%d.images", i)] = paritytest.RandTensor(rng, 1, n, 3, S, S)
		ints[fmt.Sprintf("client%d.labels", i)] = paritytest.Labels(rng, n, C)
	}
	meta := map[string]string{"lr": "0.05", "momentum": "0.9", "weight_decay": "5e-4", "batch_size": "3", "local_epochs": "2", "ratio": "0.4"}
	init := initParams(rng, d, 4)
	var all []float32
	for i := range sizes {
		all = append(all, batch[fmt.Sprintf("client%d.images", i)].Data...)
	}
	liveUnits(t, m, init, all, 16) // gradients flow (not weight decay alone)
	f := paritytest.Write(t, m, "clip_adapter", init, batch, ints, meta)
	out, err := parity.RunRound(ctx, Method{}, f)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 3*2+2 {
		t.Errorf("%d tensors in the round's output, want 3 clients' and the server's W1, W2", len(out))
	}
	sec, err := Method{}.SettingsFrom(f)
	if err != nil {
		t.Fatal(err)
	}
	if s := sec.(*Settings); s.Ratio != 0.4 || s.Reduction != 4 {
		t.Fatalf("settings %+v", s)
	}
	opts, err := f.TrainOptions()
	if err != nil {
		t.Fatal(err)
	}
	in := parity.RoundInputs{Model: m, Init: f.Params, Tokens: f.Ints["tokens"], Classes: C, Train: opts}
	for i := range sizes {
		in.Clients = append(in.Clients, parity.TensorClient{Pixels: batch[fmt.Sprintf("client%d.images", i)].Data,
			Labels: f.Ints[fmt.Sprintf("client%d.labels", i)]})
	}
	ref, err := parity.Round(ctx, Method{}, sec, in)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{ParamW1, ParamW2} {
		g := out["global."+name]
		if g == nil || tensortest.BitsDiff(tensor.Named{name: g}, tensor.Named{name: ref["global."+name]}) != "" {
			t.Fatalf("global.%s missing or different from parity.Round's", name)
		}
		// FedAvg: Σ_i n_i/N · trained_i, accumulated in float64
		for j := range g.Data {
			var acc float64
			for i, n := range sizes {
				acc += float64(n) / 16 * float64(out[fmt.Sprintf("client%d.trained.%s", i, name)].Data[j])
			}
			if math.Abs(acc-float64(g.Data[j])) > 1e-7*(1+math.Abs(acc)) {
				t.Fatalf("global.%s[%d] = %v, FedAvg of the clients' %v", name, j, g.Data[j], acc)
			}
		}
		for i := range sizes {
			tr := out[fmt.Sprintf("client%d.trained.%s", i, name)]
			if tr == nil || tensortest.BitsDiff(tensor.Named{name: tr}, tensor.Named{name: f.Params[name]}) == "" ||
				tensortest.BitsDiff(tensor.Named{name: tr}, tensor.Named{name: g}) == "" {
				t.Errorf("client %d's %s missing, untrained or the server's", i, name)
			}
			// clients 0 and 2 take as many steps: weight decay alone would
			// leave them equal
			if i == 2 && tensortest.BitsDiff(tensor.Named{name: tr}, tensor.Named{name: out["client0.trained."+name]}) == "" {
				t.Errorf("clients 0 and 2 trained the same %s", name)
			}
			// parity.Round fits and aggregates only: before the round's
			// evaluation instruction brings the server's adapter
			// (TestEvaluateReceivesGlobal) the production Site holds the
			// adapter it trained
			if tensortest.BitsDiff(tensor.Named{name: ref[fmt.Sprintf("client%d.trained.%s", i, name)]}, tensor.Named{name: tr}) != "" {
				t.Errorf("parity.Round: client %d's site holds another %s than the one it trained", i, name)
			}
		}
	}
}

// TestSettingsFromBounds: the metadata ratio's closed range [0, 1] takes
// both ends, and a metadata logit_scale is accepted within
// 1e-6·(1 + |model's|) of the model's (at the bound exactly, and 3e-6 off
// a scale of ln 100, whose bound is 5.6e-6) and refused beyond.
func TestSettingsFromBounds(t *testing.T) {
	m := tinyModel(100)
	for _, r := range []string{"0", "1"} {
		f := stepFixture(t, m, 2, 3, 4, map[string]string{"lr": "0.1", "ratio": r})
		sec, err := Method{}.SettingsFrom(f)
		if err != nil {
			t.Fatalf("ratio %s: %v", r, err)
		}
		if got := sec.(*Settings).Ratio; fmt.Sprint(got) != r {
			t.Errorf("ratio %s: settings ratio %v", r, got)
		}
	}
	ls := float64(m.W.LogitScale)
	for _, tc := range []struct {
		model *clip.Model
		meta  float64
		ok    bool
	}{
		{tinyModel(1), 1e-6, true}, // |Δ| = 1e-6·(1 + 0) exactly
		{m, ls + 3e-6, true},
		{m, ls - 3e-6, true},
		{m, ls + 8e-6, false},
		{tinyModel(1), 1.5e-6, false},
	} {
		f := stepFixture(t, tc.model, 2, 3, 4, map[string]string{"lr": "0.1", "logit_scale": fmt.Sprint(tc.meta)})
		_, err := Method{}.SettingsFrom(f)
		if tc.ok && err != nil {
			t.Errorf("logit_scale %v (model %v): %v", tc.meta, tc.model.W.LogitScale, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "logit_scale")) {
			t.Errorf("logit_scale %v (model %v): error %v, want one naming logit_scale", tc.meta, tc.model.W.LogitScale, err)
		}
	}
}

// TestPredictorSaved: the predictor takes a saved site with both matrices
// of the run's shapes and refuses one lacking either, naming it.
func TestPredictorSaved(t *testing.T) {
	m := tinyModel(100)
	d := m.W.Config.EmbedDim
	s := &Settings{Ratio: 0.2, Reduction: 4}
	pe := methods.PredictEnv{Model: m}
	saved := s.Init(d, rand.New(rand.NewPCG(1, 1)))
	if _, err := (Method{}).Predictor(pe, s, saved); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{ParamW1, ParamW2} {
		bad := saved.Clone()
		bad[name] = tensor.New(d, d)
		if _, err := (Method{}).Predictor(pe, s, bad); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s of shape [%d %d]: error %v, want one naming it", name, d, d, err)
		}
	}
}

// TestPredictorLogits: the predictor scores pixels with the saved adapter
// on the frozen encoders against the template's prompts: the float64
// oracle's logits of the model's image and text features.
func TestPredictorLogits(t *testing.T) {
	w, tok, err := assets.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	d := m.W.Config.EmbedDim
	classes := []string{"red_circle", "blue square", "green striped triangle"}
	s := &Settings{Ratio: 0.3, Reduction: 4}
	rng := rand.New(rand.NewPCG(2, 2))
	saved := s.Init(d, rng)
	pe := methods.PredictEnv{Model: m, Tok: tok, Template: "a photo of a {}."}
	pr, err := (Method{}).Predictor(pe, s, saved)
	if err != nil {
		t.Fatal(err)
	}
	S := m.W.Config.Vision.ImageSize
	const B = 3
	px := make([]float32, B*3*S*S)
	for i := range px {
		px[i] = float32(rng.NormFloat64())
	}
	got, err := pr.Logits(px, B, classes)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := pe.Tokens(classes)
	if err != nil {
		t.Fatal(err)
	}
	methods.DetachAll(m)
	img := append([]float32(nil), m.EncodeImage(px, B)...)
	txt, err := m.EncodeText(tokens, len(classes))
	if err != nil {
		t.Fatal(err)
	}
	want := oracleLogits(saved, 0.3, float64(m.W.LogitScale), img, B, d, txt)
	if len(got) != len(want) {
		t.Fatalf("%d logits, want %d", len(got), len(want))
	}
	for i := range want {
		if math.Abs(float64(got[i])-want[i]) > 1e-4*(1+math.Abs(want[i])) {
			t.Fatalf("logit %d = %v, oracle %v", i, got[i], want[i])
		}
	}
}
