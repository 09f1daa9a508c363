package plot

import (
	"context"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/internal/testmodel"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/predict"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/world"
)

// The ResNet fixture (testdata/plot/rn_init.safetensors, rn_step.safetensors):
// the authors' plot-coop on clip-rn-tiny with their own ModifiedResNet and
// every-token AttentionPool2d (reference/plot/README.md). The fixture
// loading is here, not in parity.go, so that it stays with this test.

// rnModel loads clip-rn-tiny, the ResNet CLIP of the parity.
func rnModel(t *testing.T) *clip.Model {
	t.Helper()
	w, _, err := checkpoint.Load("../../testdata/clip-rn-tiny/openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if w.ResNet == nil {
		t.Fatal("clip-rn-tiny did not load as a ResNet CLIP")
	}
	return clip.New(w)
}

// rnSettings reads PLOT's settings from the fixture's metadata (the keys
// the README lists; Caltech101: no global branch).
func rnSettings(meta map[string]string) (*Settings, error) {
	s := &Settings{InitStd: 0.02}
	ints := map[string]*int{"n_ctx": &s.NCtx, "n_prompts": &s.NPrompts, "max_iter": &s.MaxIter}
	for k, dst := range ints {
		v, err := strconv.Atoi(meta[k])
		if err != nil {
			return nil, fmt.Errorf("metadata %s: %w", k, err)
		}
		*dst = v
	}
	for k, dst := range map[string]*float64{"eps": &s.Eps, "thresh": &s.Thresh, "init_std": &s.InitStd} {
		v, err := strconv.ParseFloat(meta[k], 64)
		if err != nil {
			return nil, fmt.Errorf("metadata %s: %w", k, err)
		}
		*dst = v
	}
	if meta["dataset"] == "ImageNet" || meta["clip"] != "clip-rn-tiny" {
		return nil, fmt.Errorf("metadata dataset %q, clip %q: want the Caltech101 step on clip-rn-tiny", meta["dataset"], meta["clip"])
	}
	return s, s.config(0).Validate()
}

// rel is max|got − want| / max|want|.
func rel(got, want []float32) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var d, ref float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i])-float64(want[i])))
		ref = math.Max(ref, math.Abs(float64(want[i])))
	}
	return d / ref
}

// rnTol is the fixture README's scale-relative tolerance of an output.
func rnTol(name string) float64 {
	switch name {
	case "image_features", "text_features", "sim", "logits", "loss":
		return 1e-5
	}
	return 1e-4 // plan, grad, step1, update
}

// rnMismatches compares the outputs with the reference ref (and the update
// step1 − init, scale-relative to the largest update) and lists every
// output beyond its tolerance.
func rnMismatches(out, ref tensor.Named, init []float32) []string {
	var bad []string
	g := "grad." + ParamCtx
	s1 := "step1." + ParamCtx
	for _, name := range []string{"image_features", "text_features", "sim", "plan", "logits", "loss", g, s1} {
		if out[name] == nil || ref[name] == nil {
			bad = append(bad, name+": missing")
			continue
		}
		if r := rel(out[name].Data, ref[name].Data); !(r <= rnTol(name)) {
			bad = append(bad, fmt.Sprintf("%s: rel %.3g > %.3g", name, r, rnTol(name)))
		}
	}
	if out[s1] != nil && ref[s1] != nil {
		upd := func(p []float32) []float32 {
			u := make([]float32, len(p))
			for i := range p {
				u[i] = p[i] - init[i]
			}
			return u
		}
		if r := rel(upd(out[s1].Data), upd(ref[s1].Data)); !(r <= 1e-4) {
			bad = append(bad, fmt.Sprintf("update: rel %.3g > 1e-4", r))
		}
	}
	return bad
}

// rnStep runs `pfedmma step`'s production client step (parity.LearnerStep:
// loss, grad, step1) on the ResNet fixture, and from a learner holding
// rn_init the recorded features: image_features [1+M, b, E] token-major,
// text_features, sim (recomputed in float64 from those two, the README's
// layout), plan, logits; and the Sinkhorn iteration count.
func rnStep(t *testing.T) (out, ref tensor.Named, f *parity.Fixture, iters int) {
	t.Helper()
	m := rnModel(t)
	dir := "../../testdata/plot/"
	f, err := parity.Load(m, dir+"rn_init.safetensors", []string{dir + "rn_step.safetensors"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref = f.Batch // the reference outputs are in the batch file
	sec, err := rnSettings(f.Meta)
	if err != nil {
		t.Fatal(err)
	}
	out, err = parity.LearnerStep(context.Background(), Method{}, sec, f)
	if err != nil {
		t.Fatal(err)
	}
	tokens, _ := f.IntsOf("tokens")
	labels, _ := f.IntsOf("labels")
	l, err := New(m, tokens, sec.config(0))
	if err != nil {
		t.Fatal(err)
	}
	init := f.Params[ParamCtx]
	if init == nil || len(init.Data) != len(l.ctx.Data) {
		t.Fatalf("rn_init %s: %v, want %v", ParamCtx, init, l.ctx.Shape)
	}
	copy(l.ctx.Data, init.Data)
	B := len(labels)
	img := m.EncodeImageTokens(f.Batch["images"].Data, B)
	logits, err := l.Logits(img, B)
	if err != nil {
		t.Fatal(err)
	}
	T, E, N, C := len(img)/(B*l.E), l.E, sec.NPrompts, l.C
	tm := make([]float32, len(img)) // [B, T, E] → [T, B, E]
	for b := 0; b < B; b++ {
		for k := 0; k < T; k++ {
			copy(tm[(k*B+b)*E:(k*B+b+1)*E], img[(b*T+k)*E:(b*T+k+1)*E])
		}
	}
	out["image_features"] = &tensor.Tensor{Shape: []int{T, B, E}, Data: tm}
	out["text_features"] = &tensor.Tensor{Shape: []int{N * C, E}, Data: append([]float32(nil), l.TextFeatures()...)}
	out["sim"] = &tensor.Tensor{Shape: []int{B * C, T - 1, N}, Data: sim64(img, l.TextFeatures(), B, T, N, C, E)}
	out["plan"] = &tensor.Tensor{Shape: []int{B * C, T - 1, N}, Data: append([]float32(nil), l.Plan()...)}
	if out["logits"] == nil {
		out["logits"] = &tensor.Tensor{Shape: []int{B, C}, Data: append([]float32(nil), logits...)}
	}
	return out, ref, f, l.Iterations()
}

// sim64 is the README's sim [B·C, M, N] in float64: row b·C + c, entry
// (m, n) = ⟨local token m of image b, text of prompt n for class c⟩, both
// L2-normalised.
func sim64(img, txt []float32, B, T, N, C, E int) []float32 {
	unit := func(x []float32) []float64 {
		var s float64
		for _, v := range x {
			s += float64(v) * float64(v)
		}
		u := make([]float64, len(x))
		for i, v := range x {
			u[i] = float64(v) / math.Sqrt(s)
		}
		return u
	}
	M := T - 1
	out := make([]float32, B*C*M*N)
	for b := 0; b < B; b++ {
		for c := 0; c < C; c++ {
			for m := 0; m < M; m++ {
				p := unit(img[(b*T+1+m)*E : (b*T+2+m)*E])
				for n := 0; n < N; n++ {
					q := unit(txt[(n*C+c)*E : (n*C+c+1)*E])
					var d float64
					for k := range p {
						d += p[k] * q[k]
					}
					out[((b*C+c)*M+m)*N+n] = float32(d)
				}
			}
		}
	}
	return out
}

// TestResNetStepFixture reproduces the authors' PLOT step on the tiny
// ResNet CLIP (rn_step.safetensors) through the production client: the
// every-token image features of their AttentionPool2d, the text features,
// sim, plan, logits, loss, the gradient and the SGD step (values and the
// update step1 − init), and their Sinkhorn iteration count.
func TestResNetStepFixture(t *testing.T) {
	out, ref, f, iters := rnStep(t)
	for _, msg := range rnMismatches(out, ref, f.Params[ParamCtx].Data) {
		t.Error(msg)
	}
	for _, name := range []string{"image_features", "plan", "grad." + ParamCtx} {
		t.Logf("%s: rel %.2g", name, rel(out[name].Data, ref[name].Data))
	}
	want, err := strconv.Atoi(f.Meta["ot_iterations"])
	if err != nil {
		t.Fatalf("metadata ot_iterations: %v", err)
	}
	if iters != want {
		t.Errorf("Sinkhorn iterations %d, theirs %d", iters, want)
	}
}

// TestResNetStepCatchesGradient: the comparison of TestResNetStepFixture
// fails when the gradient is halved or zeroed (the gradient itself and the
// SGD step taken from it, by optim's SGD with the fixture's settings).
func TestResNetStepCatchesGradient(t *testing.T) {
	out, ref, f, _ := rnStep(t)
	init := f.Params[ParamCtx].Data
	opts, err := f.TrainOptions()
	if err != nil {
		t.Fatal(err)
	}
	g := "grad." + ParamCtx
	for _, k := range []float32{0.5, 0} {
		bad := tensor.Named{}
		for name, v := range out {
			bad[name] = v
		}
		gr := make([]float32, len(out[g].Data))
		for i, v := range out[g].Data {
			gr[i] = k * v
		}
		val := append([]float32(nil), init...)
		p := []optim.Param{{Name: ParamCtx, Value: val, Grad: gr}}
		if err := optim.NewSGD(opts.Momentum, opts.WD, false).Step(opts.LR, p); err != nil {
			t.Fatal(err)
		}
		bad[g] = &tensor.Tensor{Shape: out[g].Shape, Data: gr}
		bad["step1."+ParamCtx] = &tensor.Tensor{Shape: out[g].Shape, Data: val}
		msgs := rnMismatches(bad, ref, init)
		if len(msgs) < 3 { // grad, step1 and the update
			t.Errorf("gradient ×%g: only %v caught", k, msgs)
		}
	}
}

// TestPlotRunsOnResNet runs PLOT in `pfedmma run`'s engine (experiment.Run)
// on a tiny random ResNet CLIP over the generated world: two clients, one
// round, evaluated; the method is not refused on the ResNet and its
// accuracies are percentages.
func TestPlotRunsOnResNet(t *testing.T) {
	dir := t.TempDir()
	if err := testmodel.WriteResNet(dir, 24, 5); err != nil {
		t.Fatal(err)
	}
	s := fromConfig(DefaultConfig())
	s.NCtx = 8 // room for the class names in the 24-token prompts
	o := experiment.Options{
		ModelPath: dir, Dataset: "world",
		DatasetOptions: dataset.Options{NumClasses: 8, TrainPerClass: 4, TestPerClass: 4},
		Protocol:       protocol.Options{Name: protocol.BaseToNovel, Clients: 2},
		Methods:        []string{"plot"},
		Sections:       map[string]config.Section{"plot": s},
		Train:          train.Options{Epochs: 1, Batch: 4, LR: 0.01, Momentum: 0.9},
		Rounds:         1, Fraction: 1, Seed: 3, OutDir: t.TempDir(), SaveAdapters: true,
	}
	res, err := experiment.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := res.Summary.Get("plot")
	if !ok {
		t.Fatal("plot did not run on the ResNet")
	}
	if len(got) == 0 {
		t.Fatal("plot on the ResNet reported no metrics")
	}
	for k, v := range got {
		if !(v >= 0 && v <= 100) && k != "loss" {
			t.Errorf("metric %s = %v", k, v)
		}
	}
	t.Logf("plot on a ResNet: %v", got)
	trained := false
	for _, r := range res.Records {
		trained = trained || (r.Method == "plot" && len(r.Participants) == 2)
	}
	if !trained {
		t.Errorf("no round of plot aggregated both clients' training: %+v", res.Records)
	}
	// `pfedmma predict` with site 1's prompts (fedotp.TokenPredictor on
	// the ResNet's tokens)
	pred, err := predict.Predict(context.Background(), predict.PredictConfig{Run: res.OutDir, Method: "plot", Client: 1, Top: 2,
		Images: []string{worldImage(t)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(pred.Images) != 1 || len(pred.Images[0].Top) != 2 || !(pred.Images[0].Top[0].Prob > 0 && pred.Images[0].Top[0].Prob <= 1) {
		t.Errorf("predict on the ResNet run: %+v", pred)
	}
}

// worldImage writes a test image of the generated world's class 0 as PNG.
func worldImage(t *testing.T) string {
	t.Helper()
	w, err := world.New(world.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	img, err := w.Render(world.Spec{Split: world.TestSplit, Class: w.Classes()[0], Domain: world.Photo}, 48)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "class0.png")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestResNetTokensDeclared: PLOT declares its ResNet tokens, so a ResNet
// CLIP runs it (methods.RunsOnResNet).
func TestResNetTokensDeclared(t *testing.T) {
	d, err := Method{}.Depth(nil, 12)
	if err != nil || !methods.RunsOnResNet(Method{}, d) {
		t.Errorf("PLOT (depth %d, %v) does not run on a ResNet", d, err)
	}
}

// TestResNetStepCommand: `pfedmma step --method plot` on clip-rn-tiny (the
// command's parity.RunCommand: the backbone check, then the method's step
// with the features it records) reproduces rn_step.
func TestResNetStepCommand(t *testing.T) {
	dir := "../../testdata/plot/"
	f, err := parity.Load(rnModel(t), dir+"rn_init.safetensors", []string{dir + "rn_step.safetensors"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := parity.RunCommand(context.Background(), "step", "plot", Method{}, f)
	if err != nil {
		t.Fatal(err)
	}
	out["sim"] = f.Batch["sim"] // the command does not write sim (TestResNetStepFixture checks it)
	for _, msg := range rnMismatches(out, f.Batch, f.Params[ParamCtx].Data) {
		t.Error(msg)
	}
}
