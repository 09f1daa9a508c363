package conformance

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

const testdata = "../../testdata/"

// stepDirs names the testdata folders of a method whose reference step
// fixtures are not in testdata/<name>/ (pFedMMA's two adapter depths).
var stepDirs = map[string][]string{"pfedmma": {"mma-l2", "mma-l0"}}

// stepFixtures finds a method's reference step fixtures by the testdata
// convention: testdata/<dir>/step*.safetensors for dir <name> or <name>
// without underscores (or the folders stepDirs names), each with the parameters of the step file's
// "params" metadata, or of testdata/<dir>/init<same suffix>.safetensors,
// init.safetensors or adapters_init.safetensors.
func stepFixtures(name string) [][2]string {
	dirs := stepDirs[name]
	if dirs == nil {
		dirs = []string{name}
		if n := strings.ReplaceAll(name, "_", ""); n != name {
			dirs = append(dirs, n) // clip_adapter's in testdata/clipadapter
		}
	}
	var out [][2]string
	for _, d := range dirs {
		steps, _ := filepath.Glob(filepath.Join(testdata, d, "step*.safetensors"))
		for _, s := range steps {
			suffix := strings.TrimPrefix(filepath.Base(s), "step")
			for _, init := range []string{"init" + suffix, "init.safetensors", "adapters_init" + suffix, "adapters_init.safetensors"} {
				init = filepath.Join(testdata, d, init)
				if _, err := os.Stat(init); err == nil {
					out = append(out, [2]string{init, s})
					break
				}
			}
		}
	}
	return out
}

// stepInputs are the batch keys every step reads: tokens, labels and
// images; a step file's other keys are kept only when the step does not
// output them (method-specific inputs).
var stepInputs = map[string]bool{"tokens": true, "labels": true, "images": true}

// TestStepContract, for every trainable method — one without a Stepper or
// without reference step fixtures (testdata/<name>/step*.safetensors, or
// the folders of stepDirs) fails, named: `pfedmma step`'s gradient of
// every tensor agrees with the reference's relative to that tensor's own
// scale, and with central finite differences of the loss it reports
// (along the reference's gradient, at a step sized to the tensor; see
// checkFD); step1 is plain SGD applied to that gradient,
// p − lr·(grad + wd·p), with a learning rate and weight decay of the
// fixture; the image features come from the images — the batch holds no
// features, the ones computed agree with the reference's, and other images
// change the loss.
func TestStepContract(t *testing.T) {
	w, _, err := checkpoint.Load(testdata + "clip-tiny/openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	forEach(t, func(t *testing.T, name string) {
		m, _ := methods.Get(name)
		st, ok := parity.StepperOf(m)
		fx := stepFixtures(name)
		if !ok {
			t.Fatalf("%s implements no parity.Stepper: `pfedmma step` cannot check it against a reference", name)
		}
		if len(fx) == 0 {
			t.Fatalf("%s has no reference step fixture (testdata/%s/step*.safetensors with its init*.safetensors)", name, name)
		}
		for _, p := range fx {
			t.Run(filepath.Base(p[1]), func(t *testing.T) { checkStep(t, clip.New(w), st, surrogate(st), p[0], p[1]) })
		}
	})
}

// checkStep checks st's step on the reference step fixture batch (with
// the parameters of file params); why, when not "", says why its gradient
// is no derivative of its loss (no finite differences then).
func checkStep(t testing.TB, model *clip.Model, st parity.Stepper, why, params, batch string) {
	checkStepInert(t, model, st, why, params, batch, nil)
}

// checkStepInert is checkStep with the tensors of inertSet taken as inert
// without finite differences (as checkFD would find them: no reference
// gradient, or one below float rounding): the mutation sweep, which runs
// no finite differences, names them from the reference's gradients.
func checkStepInert(t testing.TB, model *clip.Model, st parity.Stepper, why, params, batch string, inertSet map[string]bool) {
	ctx := context.Background()
	f, err := parity.Load(model, params, []string{batch}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// the batch is the step's inputs: no image features, and nothing the
	// step outputs (a reference output read back is no check)
	ref := tensor.Named{}
	for k, v := range f.Batch {
		if strings.Contains(k, "image_features") {
			ref[k] = v
			delete(f.Batch, k)
		}
	}
	if f.Batch["images"] == nil {
		t.Fatalf("%s holds no images", batch)
	}
	out, err := st.Step(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range f.Batch {
		if _, isOutput := out[k]; isOutput && !stepInputs[k] {
			ref[k] = v
			delete(f.Batch, k)
		}
	}
	for k := range f.Ints {
		if _, isOutput := out[k]; isOutput && !stepInputs[k] {
			delete(f.Ints, k)
		}
	}
	if out, err = st.Step(ctx, f); err != nil {
		t.Fatal(err)
	}
	loss := scalar(t, out, "loss")
	// image features from the images, as the reference computed them
	if want, got := ref["image_features"], out["image_features"]; want != nil && got != nil {
		relClose(t, "image_features", got.Data, want.Data, 1e-4)
	}
	// other images give another loss
	zero := tensor.Named{}
	for k, v := range f.Batch {
		zero[k] = v
	}
	img := f.Batch["images"].Clone()
	for i := range img.Data {
		img.Data[i] = -img.Data[i]
	}
	f.Batch["images"] = img
	other, err := st.Step(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	if scalar(t, other, "loss") == loss {
		t.Error("the loss does not depend on the images")
	}
	f.Batch = zero
	// gradients against the reference's and against finite differences
	// of the reported loss, per tensor and relative to its own scale
	checked := 0
	if why != "" {
		t.Logf("no finite differences: %s", why)
	}
	for _, gname := range sortedKeys(ref) {
		pname, ok := strings.CutPrefix(gname, "grad.")
		if ok && f.Params[pname] != nil && out[gname] == nil {
			t.Errorf("the step outputs no %s; the reference's holds one", gname)
		}
	}
	for _, gname := range sortedKeys(out) {
		pname, ok := strings.CutPrefix(gname, "grad.")
		if !ok {
			continue
		}
		p, g := f.Params[pname], out[gname]
		if p == nil || len(p.Data) != len(g.Data) {
			continue // a gradient of an input that is no parameter
		}
		want := ref[gname]
		if want != nil && len(want.Data) != len(g.Data) {
			t.Errorf("%s: reference %s holds %d values, the step's %d", batch, gname, len(want.Data), len(g.Data))
			want = nil
		}
		inert := inertSet[pname]
		if why == "" && !inert {
			var n int
			n, inert = checkFD(t, st, f, pname, g.Data, want, float64(loss))
			checked += n
		}
		switch {
		case want != nil && !inert:
			checkGrad(t, pname, g.Data, want.Data)
		case want == nil && !inert:
			// a reference without the gradient had none (requires_grad
			// on, no path to the loss): only an inert tensor may
			t.Errorf("%s holds no reference %s", batch, gname)
		}
		// step1 = p − lr·(grad + wd·p)
		s1 := out["step1."+pname]
		if s1 == nil {
			t.Errorf("no step1.%s", pname)
			continue
		}
		checkSGD(t, pname, p.Data, g.Data, s1.Data, f.Meta)
		checked++
	}
	if checked == 0 {
		t.Fatal("no gradient checked")
	}
}

// gradTol is the largest difference, relative to the largest entry of the
// reference's gradient of the same tensor, between a step's gradient and
// its reference's (float32 against the reference's float32 or float64).
const gradTol = 2e-2

// checkGrad compares the gradient g of parameter name with the reference's
// want, relative to want's own scale: a zeroed, halved or sign-flipped
// gradient fails however small the tensor's gradients are.
func checkGrad(t testing.TB, name string, g, want []float32) {
	t.Helper()
	var d, r float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(g[i])-float64(want[i])))
		r = math.Max(r, math.Abs(float64(want[i])))
	}
	if !(d <= gradTol*r) {
		t.Errorf("grad.%s: max|Δ| %.3g from the reference's > %g·max|reference| %.3g", name, d, gradTol, r)
	}
}

// checkFD checks gradient g of parameter pname against central finite
// differences of the reported loss (loss0 at p), and returns the number of
// comparisons. Along the unit direction d of want (the reference's
// gradient; g's own when want is nil or zero), with a step sized so that
// the loss changes by far more than its float32 rounding, the derivative
// must equal g·d within 5%; a zeroed, halved or sign-flipped gradient
// fails however small the tensor's gradients are. Where the loss does not
// change along d even at the largest step, and the reference's gradient is
// below that resolution too, the tensor is inert (a key bias before a
// softmax): g must be as small, and inert is true. At g's two largest
// entries, where a coordinate step resolves the tensor's gradients, the
// partial derivatives must agree too.
func checkFD(t testing.TB, st parity.Stepper, f *parity.Fixture, pname string, g []float32, want *tensor.Tensor, loss0 float64) (checked int, inert bool) {
	t.Helper()
	p := f.Params[pname]
	dir := g
	if want != nil && norm(want.Data) > 0 {
		dir = want.Data
	}
	n := norm(dir)
	if n == 0 {
		t.Logf("%s: the gradient is identically zero in the step and its reference", pname)
		return 0, true
	}
	d := make([]float32, len(dir))
	for i := range dir {
		d[i] = float32(float64(dir[i]) / n)
	}
	// the loss's rounding: some float32 ulps of it
	noise := 64 * math.Max(math.Abs(loss0), 1) * 0x1p-24
	var gd float64
	for i := range g {
		gd += float64(g[i]) * float64(d[i])
	}
	h := math.Min(2e-3*math.Max(math.Abs(loss0), 1)/n, fdMaxStep*(1+rms(p.Data)))
	fd := centralFD(t, st, f, p.Data, d, h)
	res := noise / h
	if math.Abs(fd) <= res && n <= res {
		if ng := norm(g); ng > res {
			t.Errorf("%s: the loss does not depend on it (finite differences %.3g at step %.3g), yet its gradient's norm is %.3g", pname, fd, h, ng)
		}
		return 1, true
	}
	if math.Abs(fd-gd) > 0.05*math.Abs(fd)+res {
		t.Errorf("%s: derivative along the reference gradient %.6g, finite differences of the loss %.6g (step %.3g)", pname, gd, fd, h)
	}
	checked++
	const hc = 5e-3
	scale := math.Max(maxAbs(g), maxAbs(dir))
	if noise/hc > 0.05*scale {
		return checked, false // a coordinate step cannot resolve this tensor's gradients
	}
	for _, i := range largest(dir, 2) {
		e := make([]float32, len(g))
		e[i] = 1
		fd := centralFD(t, st, f, p.Data, e, hc)
		gi := float64(g[i])
		if math.Abs(fd-gi) > 0.05*math.Abs(fd)+0.01*scale+noise/hc {
			t.Errorf("%s[%d]: gradient %.6g, finite differences of the loss %.6g", pname, i, gi, fd)
		}
		checked++
	}
	return checked, false
}

// surrogates are Steppers whose gradient is, by the reference's design,
// not the gradient of the loss they report, beside those that say so
// themselves (methods.SurrogateGradient).
var surrogates = map[string]string{
	"pfedmma": "the reference scales the gradient through the adapters of blocks ≥ 1 (1/scale in, scale out; pfedmma.Branch)",
}

// surrogate says why st's gradient is no derivative of its loss, or "".
func surrogate(st parity.Stepper) string {
	if sur, ok := st.(methods.SurrogateGradient); ok {
		return sur.SurrogateGradient()
	}
	if m, ok := st.(methods.Method); ok {
		return surrogates[m.Info().Name]
	}
	return ""
}

// fdMaxStep bounds a directional finite-difference step, relative to
// 1 + the parameter's root mean square.
const fdMaxStep = 1.0

// centralFD is (loss(p + h·d) − loss(p − h·d)) / 2h, restoring p.
func centralFD(t testing.TB, st parity.Stepper, f *parity.Fixture, p, d []float32, h float64) float64 {
	t.Helper()
	ctx := context.Background()
	orig := append([]float32(nil), p...)
	defer copy(p, orig)
	eval := func(s float64) float64 {
		for i := range p {
			p[i] = float32(float64(orig[i]) + s*float64(d[i]))
		}
		out, err := st.Step(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return float64(scalar(t, out, "loss"))
	}
	return (eval(h) - eval(-h)) / (2 * h)
}

func norm(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s)
}

func rms(x []float32) float64 {
	if len(x) == 0 {
		return 0
	}
	return norm(x) / math.Sqrt(float64(len(x)))
}

func maxAbs(x []float32) float64 {
	var m float64
	for _, v := range x {
		m = math.Max(m, math.Abs(float64(v)))
	}
	return m
}

// checkSGD checks that step1 = p − lr·(grad + wd·p), one fresh SGD step,
// for a learning rate of the fixture's metadata (a key ending in "lr") and
// one of its weight decays (a key containing "weight_decay") or none,
// within float32 rounding of p.
func checkSGD(t testing.TB, name string, p, g, s1 []float32, meta map[string]string) {
	t.Helper()
	var lrs []float64
	wds := []float64{0}
	for k, v := range meta {
		var x float64
		if parse(v, &x) != nil {
			continue
		}
		if strings.HasSuffix(k, "lr") {
			lrs = append(lrs, x)
		}
		if strings.Contains(k, "weight_decay") {
			wds = append(wds, x)
		}
	}
	var scale, pmax float64
	for i := range p {
		scale = math.Max(scale, math.Abs(float64(p[i])-float64(s1[i])))
		pmax = math.Max(pmax, math.Abs(float64(p[i])))
	}
	if scale == 0 {
		t.Errorf("step1.%s: no update", name)
		return
	}
	best := math.Inf(1)
	for _, lr := range lrs {
		for _, wd := range wds {
			var res float64
			for i := range p {
				want := float64(p[i]) - lr*(float64(g[i])+wd*float64(p[i]))
				res = math.Max(res, math.Abs(want-float64(s1[i])))
			}
			best = math.Min(best, res)
		}
	}
	// float32 rounding of p and of the update
	if tol := 1e-5*scale + 4*0x1p-24*pmax; !(best <= tol) {
		t.Errorf("step1.%s is not p − lr·(grad + wd·p) for any lr %v and weight decay %v of the fixture: residual %.3g > %.3g (update %.3g)", name, lrs, wds, best, tol, scale)
	}
}

func scalar(t testing.TB, n tensor.Named, k string) float32 {
	t.Helper()
	v := n[k]
	if v == nil || len(v.Data) != 1 {
		t.Fatalf("step output %q missing or not a scalar", k)
	}
	return v.Data[0]
}

func sortedKeys(n tensor.Named) []string {
	out := make([]string, 0, len(n))
	for k := range n {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// largest returns the indices of the k largest |x|.
func largest(x []float32, k int) []int {
	idx := make([]int, len(x))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return math.Abs(float64(x[idx[a]])) > math.Abs(float64(x[idx[b]])) })
	return idx[:min(k, len(idx))]
}

func relClose(t testing.TB, name string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	var d, r float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i]-want[i])))
		r = math.Max(r, math.Abs(float64(want[i])))
	}
	if !(d <= tol*r) {
		t.Errorf("%s: max|Δ| %.3g > %.3g·max|ref| %.3g", name, d, tol, r)
	}
}

func parse(s string, x *float64) error {
	v, err := strconv.ParseFloat(s, 64)
	*x = v
	return err
}
