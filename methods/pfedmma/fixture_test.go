package pfedmma

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

func open(t *testing.T, path string) *safetensors.File {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func get(t *testing.T, f *safetensors.File, name string) []float32 {
	t.Helper()
	x, err := f.Float32(name)
	if err != nil {
		t.Fatal(err)
	}
	return x.Data
}

func getInts(t *testing.T, f *safetensors.File, name string) []int {
	t.Helper()
	x, _, err := f.Int64(name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int, len(x))
	for i, v := range x {
		out[i] = int(v)
	}
	return out
}

// closeTo checks max |Δ| ≤ tol·(1 + |ref|) elementwise, or, with perTensor,
// ≤ tol·(1 + max|ref|) (the fixture README's two tolerances).
func closeTo(t *testing.T, name string, got, want []float32, tol float64, perTensor bool) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	var maxRef float64
	for _, w := range want {
		maxRef = math.Max(maxRef, math.Abs(float64(w)))
	}
	for i := range want {
		ref := math.Abs(float64(want[i]))
		if perTensor {
			ref = maxRef
		}
		d := math.Abs(float64(got[i] - want[i]))
		if d > tol*(1+ref) || math.IsNaN(d) {
			t.Fatalf("%s[%d]: got %v, want %v (|Δ| %.3g > %.3g)", name, i, got[i], want[i], d, tol*(1+ref))
		}
	}
}

type fixture struct {
	dir        string
	start, end int
}

var fixtures = []fixture{{"mma-l2", 2, 4}, {"mma-l0", 0, 4}}

func newLearner(t *testing.T, fx fixture) (*Learner, *safetensors.File) {
	t.Helper()
	w, _, err := checkpoint.Load("../testdata/clip-tiny/openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	init := open(t, "../testdata/"+fx.dir+"/adapters_init.safetensors")
	named, err := init.Float32All()
	if err != nil {
		t.Fatal(err)
	}
	a := New(Config{Start: fx.start, End: fx.end, Dim: 16, Scale: 0.005}, 128, 128, nil)
	if err := a.Load(named); err != nil {
		t.Fatal(err)
	}
	l, err := NewLearner(m, a, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Attach()
	step := open(t, "../testdata/"+fx.dir+"/step.safetensors")
	if err := l.SetClasses(getInts(t, step, "tokens"), 5); err != nil {
		t.Fatal(err)
	}
	return l, step
}

func params(a *Adapters) []optim.Param {
	var ps []optim.Param
	for _, n := range a.Names() {
		ps = append(ps, optim.Param{Name: n, Value: a.Params[n].Data, Grad: a.Grads[n].Data})
	}
	return ps
}

// TestStepMatchesReference checks features, logits, loss, every gradient and
// the parameters after one SGD step against the authors' PyTorch code.
func TestStepMatchesReference(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.dir, func(t *testing.T) {
			l, step := newLearner(t, fx)
			images := get(t, step, "images")
			labels := getInts(t, step, "labels")
			B := len(labels)
			prefix := clip.ImagePrefix(l.Model, fx.start, images, B, nil)
			l.Adapters.ZeroGrads()
			loss, logits, err := l.Step(prefix, B, labels)
			if err != nil {
				t.Fatal(err)
			}
			closeTo(t, "image_features", l.imgFeat, get(t, step, "image_features"), 1e-4, false)
			closeTo(t, "text_features", l.txtFeat, get(t, step, "text_features"), 1e-4, false)
			closeTo(t, "logits", logits, get(t, step, "logits"), 1e-4, false)
			closeTo(t, "loss", []float32{float32(loss)}, get(t, step, "loss"), 1e-4, false)
			n := 0
			for _, name := range step.Names() {
				if p, ok := strings.CutPrefix(name, "grad."); ok {
					g, exists := l.Adapters.Grads[p]
					if !exists {
						t.Fatalf("fixture gradient %q has no adapter parameter", p)
					}
					closeTo(t, name, g.Data, get(t, step, name), 1e-4, true)
					n++
				}
			}
			if n != len(l.Adapters.Params) {
				t.Fatalf("checked %d gradients, adapters have %d parameters", n, len(l.Adapters.Params))
			}
			md := step.Metadata()
			if md["lr"] != "0.001" || md["momentum"] != "0.9" {
				t.Fatalf("unexpected fixture metadata %v", md)
			}
			opt := optim.NewSGD(0.9, 5e-4, false)
			if err := opt.Step(0.001, params(l.Adapters)); err != nil {
				t.Fatal(err)
			}
			for name, p := range l.Adapters.Params {
				closeTo(t, "step1."+name, p.Data, get(t, step, "step1."+name), 1e-4, true)
			}
		})
	}
}

// TestRoundMatchesReference replays the fixture's federated round: two
// clients train from the same initial adapters with fresh optimizers
// (batch 4, stored order, one epoch), then the shared projections are
// averaged with weights n_i/n.
func TestRoundMatchesReference(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.dir, func(t *testing.T) {
			round := open(t, "../testdata/"+fx.dir+"/round.safetensors")
			trained := make([]tensor.Named, 2)
			sizes := make([]int, 2)
			for c := 0; c < 2; c++ {
				l, _ := newLearner(t, fx)
				images := get(t, round, fmt.Sprintf("client%d.images", c))
				labels := getInts(t, round, fmt.Sprintf("client%d.labels", c))
				sizes[c] = len(labels)
				opt := optim.NewSGD(0.9, 5e-4, false)
				px := 3 * 32 * 32
				for s := 0; s < len(labels); s += 4 {
					e := min(s+4, len(labels))
					prefix := clip.ImagePrefix(l.Model, fx.start, images[s*px:e*px], e-s, nil)
					l.Adapters.ZeroGrads()
					if _, _, err := l.Step(prefix, e-s, labels[s:e]); err != nil {
						t.Fatal(err)
					}
					if err := opt.Step(0.01, params(l.Adapters)); err != nil {
						t.Fatal(err)
					}
				}
				for name, p := range l.Adapters.Params {
					closeTo(t, fmt.Sprintf("client%d.trained.%s", c, name), p.Data, get(t, round, fmt.Sprintf("client%d.trained.%s", c, name)), 1e-4, true)
				}
				trained[c] = l.Adapters.Params.Clone()
			}
			total := float32(sizes[0] + sizes[1])
			checked := 0
			for name := range trained[0] {
				if !IsShared(name) {
					continue
				}
				avg := make([]float32, len(trained[0][name].Data))
				for c := 0; c < 2; c++ {
					for i, v := range trained[c][name].Data {
						avg[i] += float32(sizes[c]) / total * v
					}
				}
				closeTo(t, "global."+name, avg, get(t, round, "global."+name), 1e-4, true)
				checked++
			}
			if checked == 0 {
				t.Fatal("no shared parameter checked")
			}
		})
	}
}
