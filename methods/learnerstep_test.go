package methods_test

import (
	"context"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/clipadapter"
	"github.com/pfedmma/pfedmma/methods/cliplora"
	"github.com/pfedmma/pfedmma/methods/fedot"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/tensor"
)

// stepWorld is a tiny random CLIP (logit multiplier e, so that finite
// differences of the float32 loss are well above its rounding), class
// prompts of C classes and a batch of B images.
func stepWorld(seed uint64) (*clip.Model, []int, int, []float32, []int) {
	cfg := clip.Config{EmbedDim: 8,
		Vision: clip.VisionConfig{ImageSize: 8, PatchSize: 4, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16},
		Text:   clip.TextConfig{ContextLength: 8, VocabSize: 30, Width: 8, Layers: 2, Heads: 2, MLPWidth: 16}}
	m := clip.New(clip.Random(cfg, seed))
	m.W.LogitScale = 1
	const C, B = 3, 4
	tokens := make([]int, C*8)
	for c := 0; c < C; c++ {
		copy(tokens[c*8:], []int{28, 3 + c, 10 + c, 29})
	}
	r := rand.New(rand.NewPCG(seed, 9))
	px := make([]float32, B*3*8*8)
	for i := range px {
		px[i] = float32(r.NormFloat64())
	}
	return m, tokens, C, px, []int{0, 2, 1, 2}
}

// initialParams builds the method's plan on the batch and returns a
// site's parameters, moved off their initial values (LoRA's B starts at
// zero, FedOT's transform at the identity).
func initialParams(t *testing.T, meth methods.Method, m *clip.Model, tokens []int, C int, px []float32, labels []int) tensor.Named {
	t.Helper()
	sec := meth.DefaultConfig()
	depth, err := meth.Depth(sec, 2)
	if err != nil {
		t.Fatal(err)
	}
	env, err := methods.TensorEnv(m, depth, tokens, C, []methods.TensorClient{{Pixels: px, Labels: labels}},
		train.Options{Epochs: 1, Batch: len(labels), LR: 0.1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer env.TrainStore.Close()
	plan, err := meth.Build(env, sec)
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Site(0)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 3))
	out := tensor.Named{}
	for _, name := range slices.Sorted(maps.Keys(p)) {
		if name == fedot.SiteClasses {
			continue
		}
		v := p[name].Clone()
		for i := range v.Data {
			v.Data[i] += float32(r.NormFloat64() * 0.2)
		}
		out[name] = v
	}
	return out
}

// TestLearnerStepContract: `pfedmma step` for FedOT, CLIP-Adapter and
// CLIP-LoRA (the generic LearnerStep through each production client):
// grad.* equals central finite differences of the step's loss, step1.* is
// one plain SGD step, logits are [B, C]; and `pfedmma round` aggregates as
// the method says (FedOT: uniform mean of w_g; the others: FedAvg).
func TestLearnerStepContract(t *testing.T) {
	for _, meth := range []methods.Method{fedot.Method{}, clipadapter.Method{}, cliplora.Method{}} {
		name := meth.Info().Name
		t.Run(name, func(t *testing.T) {
			m, tokens, C, px, labels := stepWorld(5)
			params := initialParams(t, meth, m, tokens, C, px, labels)
			fix := func(p tensor.Named) *methods.Fixture {
				return &methods.Fixture{Model: m, Params: p, Batch: tensor.Named{"images": {Shape: []int{4, 3, 8, 8}, Data: px}},
					Ints: map[string][]int{"labels": labels, "tokens": tokens},
					Meta: map[string]string{"lr": "0.1", "momentum": "0", "weight_decay": "0"}}
			}
			st := meth.(methods.Stepper)
			out, err := st.Step(context.Background(), fix(params))
			if err != nil {
				t.Fatal(err)
			}
			if lg := out["logits"]; lg == nil || len(lg.Data) != len(labels)*C {
				t.Fatalf("logits: %v", lg)
			}
			loss := func() float64 {
				o, err := st.Step(context.Background(), fix(params))
				if err != nil {
					t.Fatal(err)
				}
				return float64(o["loss"].Data[0])
			}
			rng := rand.New(rand.NewPCG(7, 7))
			checked := 0
			for _, pn := range slices.Sorted(maps.Keys(params)) {
				g, ok := out["grad."+pn]
				if !ok {
					continue // not trained (none here)
				}
				checked++
				if name == "clip_lora" {
					// the step's loss is written as float32, and the
					// smallest LoRA entries' differences (through both
					// whole encoders) are a few of its ulps: check the
					// derivative along a random direction of the whole
					// tensor instead, a sum well above the rounding
					checkDirectional(t, pn, params[pn].Data, g.Data, loss, rng)
				} else if err := gradcheck.Check(pn, params[pn].Data, g.Data, loss, 1e-2, 2e-2, 6, rng); err != nil {
					t.Error(err)
				}
				s1 := out["step1."+pn]
				for i, v := range params[pn].Data {
					if want := v - 0.1*g.Data[i]; math.Abs(float64(s1.Data[i]-want)) > 1e-6*(1+math.Abs(float64(want))) {
						t.Fatalf("step1.%s[%d] = %v, want %v", pn, i, s1.Data[i], want)
					}
				}
			}
			if checked == 0 {
				t.Fatal("no gradients in the step output")
			}
			// one round of two clients with different labels
			rf := fix(params)
			rf.Batch = tensor.Named{"client0.images": {Shape: []int{4, 3, 8, 8}, Data: px}, "client1.images": {Shape: []int{4, 3, 8, 8}, Data: px}}
			rf.Ints = map[string][]int{"client0.labels": labels, "client1.labels": {1, 1, 0, 0}, "tokens": tokens}
			rf.Meta["batch_size"] = "2"
			ro, err := methods.FixtureRound(context.Background(), meth, rf)
			if err != nil {
				t.Fatal(err)
			}
			globals := 0
			for k, g := range ro {
				pn, ok := strings.CutPrefix(k, "global.")
				if !ok {
					continue
				}
				globals++
				a, b := ro["client0.trained."+pn], ro["client1.trained."+pn]
				if a == nil || b == nil {
					t.Fatalf("round output lacks the clients' %s", pn)
				}
				for i := range g.Data {
					want := (a.Data[i] + b.Data[i]) / 2 // equal n_i: FedAvg and the uniform mean agree
					if math.Abs(float64(g.Data[i]-want)) > 1e-6 {
						t.Fatalf("global.%s[%d] = %v, want the clients' mean %v", pn, i, g.Data[i], want)
					}
				}
			}
			if globals == 0 {
				t.Fatalf("round output has no global tensor: %v", slices.Sorted(maps.Keys(ro)))
			}
		})
	}
}

// checkDirectional compares (L(p+εv) − L(p−εv)) / 2ε with ⟨g, v⟩ for a
// random ±1 direction v.
func checkDirectional(t *testing.T, name string, p, g []float32, loss func() float64, rng *rand.Rand) {
	t.Helper()
	const eps = 1e-2
	v := make([]float32, len(p))
	var want float64
	for i := range v {
		v[i] = 1
		if rng.IntN(2) == 0 {
			v[i] = -1
		}
		want += float64(v[i]) * float64(g[i])
	}
	orig := slices.Clone(p)
	for i := range p {
		p[i] = orig[i] + eps*v[i]
	}
	lp := loss()
	for i := range p {
		p[i] = orig[i] - eps*v[i]
	}
	lm := loss()
	copy(p, orig)
	num := (lp - lm) / (2 * eps)
	if math.Abs(num-want) > 2e-2*math.Abs(num)+1e-5 {
		t.Errorf("%s: directional derivative %.6g by finite differences, %.6g from the gradient", name, num, want)
	}
}
