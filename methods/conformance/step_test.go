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
	"github.com/pfedmma/pfedmma/methods/fixture"
	"github.com/pfedmma/pfedmma/tensor"
)

const testdata = "../../testdata/"

// stepFixtures finds a method's reference step fixtures by the testdata
// convention: testdata/<name>/step*.safetensors, each with the parameters
// of testdata/<name>/init<same suffix>.safetensors (or init.safetensors).
func stepFixtures(name string) [][2]string {
	steps, _ := filepath.Glob(filepath.Join(testdata, name, "step*.safetensors"))
	var out [][2]string
	for _, s := range steps {
		suffix := strings.TrimPrefix(filepath.Base(s), "step")
		init := filepath.Join(testdata, name, "init"+suffix)
		if _, err := os.Stat(init); err != nil {
			init = filepath.Join(testdata, name, "init.safetensors")
		}
		if _, err := os.Stat(init); err == nil {
			out = append(out, [2]string{init, s})
		}
	}
	return out
}

// stepInputs are the batch keys every step reads: tokens, labels and
// images; a step file's other keys are kept only when the step does not
// output them (method-specific inputs).
var stepInputs = map[string]bool{"tokens": true, "labels": true, "images": true}

// TestStepContract, for every method with a Stepper and reference step
// fixtures (testdata/<name>/step*.safetensors): `pfedmma step`'s gradient
// agrees with central finite differences of the loss it reports; step1 is
// plain SGD applied to that gradient, p − lr·(grad + wd·p), with a
// learning rate and weight decay of the fixture; the image features come
// from the images — the batch holds no features, the ones computed agree
// with the reference's, and other images change the loss.
func TestStepContract(t *testing.T) {
	w, _, err := checkpoint.Load(testdata + "clip-tiny/openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	forEach(t, func(t *testing.T, name string) {
		m, _ := methods.Get(name)
		st, ok := m.(fixture.Stepper)
		fx := stepFixtures(name)
		if !ok || len(fx) == 0 {
			t.Logf("%s: no Stepper with reference step fixtures in testdata/%s: its step contract is its own tests'", name, name)
			return
		}
		for _, p := range fx {
			t.Run(filepath.Base(p[1]), func(t *testing.T) { checkStep(t, clip.New(w), st, p[0], p[1]) })
		}
	})
}

func checkStep(t *testing.T, model *clip.Model, st fixture.Stepper, params, batch string) {
	ctx := context.Background()
	f, err := fixture.Load(model, params, []string{batch}, nil)
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
	// gradients against finite differences of the reported loss
	checked := 0
	for _, gname := range sortedKeys(out) {
		pname, ok := strings.CutPrefix(gname, "grad.")
		if !ok {
			continue
		}
		p, g := f.Params[pname], out[gname]
		if p == nil || len(p.Data) != len(g.Data) {
			continue // a gradient of an input that is no parameter
		}
		if sur, ok := st.(methods.SurrogateGradient); ok {
			t.Logf("%s: no finite differences: %s", pname, sur.SurrogateGradient())
		} else {
			checked += checkFD(t, st, f, pname, g.Data)
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

// checkFD compares the largest entries of gradient g of parameter pname
// with central finite differences of the reported loss; it returns the
// number of entries checked.
func checkFD(t *testing.T, st fixture.Stepper, f *fixture.Fixture, pname string, g []float32) int {
	t.Helper()
	ctx := context.Background()
	p := f.Params[pname]
	checked := 0
	{
		for _, i := range largest(g, 2) {
			const h = 5e-3
			orig := p.Data[i]
			p.Data[i] = orig + h
			up, err := st.Step(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			p.Data[i] = orig - h
			down, err := st.Step(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			p.Data[i] = orig
			fd := (float64(scalar(t, up, "loss")) - float64(scalar(t, down, "loss"))) / (2 * h)
			gi := float64(g[i])
			if math.Abs(fd-gi) > 0.05*math.Abs(gi)+2e-3 {
				t.Errorf("%s[%d]: gradient %.6g, finite differences of the loss %.6g", pname, i, gi, fd)
			}
			checked++
		}
	}
	return checked
}

// checkSGD checks that step1 = p − lr·(grad + wd·p), one fresh SGD step,
// for a learning rate of the fixture's metadata (a key ending in "lr") and
// one of its weight decays (a key containing "weight_decay") or none,
// within float32 rounding of p.
func checkSGD(t *testing.T, name string, p, g, s1 []float32, meta map[string]string) {
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

func scalar(t *testing.T, n tensor.Named, k string) float32 {
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

func relClose(t *testing.T, name string, got, want []float32, tol float64) {
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
