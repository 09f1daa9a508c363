package pfedmma

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/safetensors"
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

type refFixture struct {
	dir        string
	start, end int
}

var fixtures = []refFixture{{"mma-l2", 2, 4}, {"mma-l0", 0, 4}}

func newLearner(t *testing.T, fx refFixture) (*Learner, *safetensors.File) {
	t.Helper()
	w, _, err := checkpoint.Load("../../testdata/clip-tiny/openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	init := open(t, "../../testdata/"+fx.dir+"/adapters_init.safetensors")
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
	step := open(t, "../../testdata/"+fx.dir+"/step.safetensors")
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
			init, err := open(t, "../../testdata/"+fx.dir+"/adapters_init.safetensors").Float32All()
			if err != nil {
				t.Fatal(err)
			}
			for name, p := range l.Adapters.Params {
				want := get(t, step, "step1."+name)
				// the update step1 − init, at its own scale: for 10 of
				// mma-l0's 50 tensors the whole update is below
				// 1e-4·(1 + max|p|)
				updateClose(t, "step1."+name, p.Data, want, init[name].Data, updateTol, 1)
				closeTo(t, "step1."+name, p.Data, want, 1e-4, true)
			}
		})
	}
}

// updateTol bounds an update p − init (one SGD step, or a round's)
// relative to the reference update's scale, as the fixtures' README states
// (gradients and parameters ≤ 1e-4, updates ≤ 1e-4 of max|update| plus one
// float32 spacing of max|p| per SGD step).
const updateTol = 1e-4

// updateClose checks got − init against want − init: max|Δ| ≤
// tol·max|want − init| + steps float32 spacings of max|p| (the rounding of
// p itself, which a weight ≈ 1 moved by 1e-4 cannot escape).
func updateClose(t *testing.T, name string, got, want, init []float32, tol float64, steps int) {
	t.Helper()
	if len(got) != len(want) || len(init) != len(want) {
		t.Fatalf("%s: %d values, reference %d, init %d", name, len(got), len(want), len(init))
	}
	var d, u, pmax float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i])-float64(want[i])))
		u = math.Max(u, math.Abs(float64(want[i])-float64(init[i])))
		pmax = math.Max(pmax, math.Abs(float64(want[i])))
	}
	ulp := float64(math.Nextafter32(float32(pmax), float32(math.Inf(1)))) - float64(float32(pmax))
	if lim := tol*u + float64(steps)*ulp; !(d <= lim) {
		t.Errorf("%s (update): max|Δ| %.3g > %.3g·max|update| %.3g + %d·ulp(max|p|) %.3g", name, d, tol, u, steps, ulp)
	} else if testing.Verbose() {
		t.Logf("%s (update): max|Δ| %.3g, %.3g of max|update| %.3g", name, d, d/u, u)
	}
}

// TestRoundMatchesReference runs the fixture's federated round through the
// production path (parity.Round: pfedmma's clients in federation Sites,
// FedAvg, the Coordinator): two clients train from the same initial
// adapters with fresh optimizers (batch 4, stored order, one epoch), then
// the shared projections are averaged with weights n_i/n.
func TestRoundMatchesReference(t *testing.T) {
	w, _, err := checkpoint.Load("../../testdata/clip-tiny/openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	for _, fx := range fixtures {
		t.Run(fx.dir, func(t *testing.T) {
			round := open(t, "../../testdata/"+fx.dir+"/round.safetensors")
			step := open(t, "../../testdata/"+fx.dir+"/step.safetensors")
			init, err := open(t, "../../testdata/"+fx.dir+"/adapters_init.safetensors").Float32All()
			if err != nil {
				t.Fatal(err)
			}
			meta, smeta := round.Metadata(), step.Metadata()
			num := func(m map[string]string, k string) float64 {
				v, err := strconv.ParseFloat(m[k], 64)
				if err != nil {
					t.Fatalf("metadata %s: %v", k, err)
				}
				return v
			}
			sec := &Settings{Start: int(num(smeta, "adapter_start")), End: int(num(smeta, "adapter_end")),
				Dim: int(num(smeta, "adapter_dim")), Scale: num(smeta, "adapter_scale"), Activation: "relu"}
			if sec.Start != fx.start {
				t.Fatalf("adapter_start %d, want %d", sec.Start, fx.start)
			}
			in := parity.RoundInputs{Model: clip.New(w), Init: init, Tokens: getInts(t, step, "tokens"),
				Train: train.Options{Epochs: int(num(meta, "local_epochs")), Batch: int(num(meta, "batch_size")),
					LR: num(meta, "lr"), Momentum: num(meta, "momentum"), WD: num(meta, "weight_decay"),
					ResetOptimizer: true, InOrder: true}}
			in.Classes = len(in.Tokens) / in.Model.W.Config.Text.ContextLength
			steps := 0 // the most SGD steps behind a tensor: a client's, + 1 for the global
			for c := 0; c < 2; c++ {
				in.Clients = append(in.Clients, parity.TensorClient{
					Pixels: get(t, round, fmt.Sprintf("client%d.images", c)),
					Labels: getInts(t, round, fmt.Sprintf("client%d.labels", c))})
				n := len(in.Clients[c].Labels)
				steps = max(steps, in.Train.Epochs*((n+in.Train.Batch-1)/in.Train.Batch)+1)
			}
			out, err := parity.Round(context.Background(), Method{}, sec, in)
			if err != nil {
				t.Fatal(err)
			}
			checked, updates := 0, 0
			for _, name := range round.Names() {
				if !strings.Contains(name, ".trained.") && !strings.HasPrefix(name, "global.") {
					continue
				}
				got, ok := out[name]
				if !ok {
					t.Fatalf("round produced no %s", name)
				}
				want := get(t, round, name)
				closeTo(t, name, got.Data, want, 1e-4, true)
				// the update p − init, at its own scale (issue 17, defect
				// 9: some updates are smaller than the tolerance on p)
				_, param, ok := strings.Cut(name, ".trained.")
				if !ok {
					param = strings.TrimPrefix(name, "global.")
				}
				if p0, ok := init[param]; ok && len(p0.Data) == len(want) {
					updateClose(t, name, got.Data, want, p0.Data, updateTol, steps)
					updates++
				}
				checked++
			}
			if checked < 2*len(init)+3 || updates < 2*len(init) {
				t.Fatalf("checked %d tensors, %d updates", checked, updates)
			}
		})
	}
}
