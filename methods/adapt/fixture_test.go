package adapt

// The fixture contract is tested here against finite differences of its
// own loss, against optim's AdamW, and against the production plan driven
// by hand; the oracle outside the project (an independent float64 PyTorch
// ADAPT, testdata/adapt) is checked in external_test.go.

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

// The interfaces `pfedmma step` and `round` look for.
var (
	_ parity.Stepper  = Method{}
	_ parity.Settings = Method{}
	_ parity.Rounder  = Method{}
)

const fixDomains, fixNCtx, fixClasses = 3, 2, 4

// fixtureParams are n domains' parameters of tinyModel, AdaLN (2 layers,
// non-zero so that every path carries gradient) when ada.
func fixtureParams(m *clip.Model, n int, ada bool, seed uint64) tensor.Named {
	cfg := Config{Domains: n, NCtx: fixNCtx, InitStd: 0.5, VisualStd: 1, Tau: 1, AdaLN: ada, AdaLNLayers: 2, Seed: seed}
	P := InitParams(cfg, m.W.Config.Text.Width, m.W.Config.Vision.Width, m.W.Config.EmbedDim)
	rng := rand.New(rand.NewPCG(seed, 11))
	for _, name := range slices.Sorted(maps.Keys(P)) {
		if strings.HasPrefix(name, AdaLNPrefix) {
			copy(P[name].Data, gradcheck.Rand(rng, len(P[name].Data), 0.3))
		}
	}
	return P
}

// stepFixture is a step on tinyModel for the client of domain 1 with EMA
// targets for domains 0 and 2, τ_d = 0.5 and the logit multiplier e¹ (from
// the metadata; the model's own is 1/0.07).
func stepFixture(ada bool) *parity.Fixture {
	m := tinyModel()
	rng := rand.New(rand.NewPCG(21, 3))
	const B = 3
	P := fixtureParams(m, fixDomains, ada, 5)
	for _, j := range []int{0, 2} {
		P[EMATargetPrefix+TextName(j)] = &tensor.Tensor{Shape: []int{fixNCtx, m.W.Config.Text.Width},
			Data: gradcheck.Rand(rng, fixNCtx*m.W.Config.Text.Width, 0.5)}
	}
	return &parity.Fixture{Model: m, Params: P,
		Batch: tensor.Named{"images": {Shape: []int{B, 3, 8, 8}, Data: gradcheck.Rand(rng, B*3*8*8, 1)}},
		Ints:  map[string][]int{"labels": {0, 3, 2}, "tokens": tinyTokens(m, fixNCtx, fixClasses), "domain": {1}},
		Meta: map[string]string{"lr": "0.01", "weight_decay": "0.05", "tau": "0.5", "lambda": "0.7", "ema": "0.9",
			"logit_scale": "1"}}
}

func runStep(t *testing.T, f *parity.Fixture) tensor.Named {
	t.Helper()
	out, err := Method{}.Step(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFixtureStepGradients: grad.<param> of `pfedmma step` equals central
// finite differences of its loss for every trained parameter — the own
// text prompt through the text encoder, the visual prompts through every
// image block and the domain weighting, AdaLN — on a 2-block CLIP with the
// logit multiplier lowered to e (via logit_scale) so the loss stays smooth
// at eps 1e-2; the other domains' prompts get no gradient.
func TestFixtureStepGradients(t *testing.T) {
	for _, ada := range []bool{false, true} {
		t.Run(fmt.Sprintf("adaln=%v", ada), func(t *testing.T) {
			f := stepFixture(ada)
			out := runStep(t, f)
			loss := func() float64 { return float64(runStep(t, f)["loss"].Data[0]) }
			rng := rand.New(rand.NewPCG(7, 1))
			var trained []string
			for _, name := range slices.Sorted(maps.Keys(out)) {
				if p, ok := strings.CutPrefix(name, "grad."); ok {
					trained = append(trained, p)
				}
			}
			want := []string{TextName(1), ParamVisual}
			if ada {
				want = append([]string{"adaln.0.bias", "adaln.0.weight", "adaln.1.bias", "adaln.1.weight"}, want...)
			}
			if !slices.Equal(trained, want) {
				t.Fatalf("gradients of %v, want %v", trained, want)
			}
			for _, name := range trained {
				if err := gradcheck.Check(name, f.Params[name].Data, out["grad."+name].Data, loss, 1e-2, 2e-2, 30, rng); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestFixtureStepOptimizer: step1.<param> is what optim's AdamW (or SGD,
// with --set optimizer=sgd) gives from the initial parameters and the
// step's gradients, bit for bit; the external prompts are the EMA toward
// their targets; --set lr overrides the metadata.
func TestFixtureStepOptimizer(t *testing.T) {
	for _, c := range []struct {
		sets map[string]string
		opt  func() optim.Optimizer
		lr   float64
	}{
		{nil, func() optim.Optimizer { return optim.NewAdamW(0.05) }, 0.01},
		{map[string]string{"lr": "0.003"}, func() optim.Optimizer { return optim.NewAdamW(0.05) }, 0.003},
		{map[string]string{"optimizer": "sgd", "momentum": "0.9"}, func() optim.Optimizer { return optim.NewSGD(0.9, 0.05, false) }, 0.01},
	} {
		f := stepFixture(true)
		for k, v := range c.sets {
			f.Meta[k] = v
		}
		out := runStep(t, f)
		P := tensor.Named{}
		var ps []optim.Param
		for _, name := range slices.Sorted(maps.Keys(f.Params)) {
			if strings.HasPrefix(name, EMATargetPrefix) {
				continue
			}
			P[name] = f.Params[name].Clone()
			if g, ok := out["grad."+name]; ok {
				ps = append(ps, optim.Param{Name: name, Value: P[name].Data, Grad: g.Data})
			}
		}
		if err := c.opt().Step(c.lr, ps); err != nil {
			t.Fatal(err)
		}
		const a = float32(0.9)
		for _, j := range []int{0, 2} {
			ext, target := P[TextName(j)].Data, f.Params[EMATargetPrefix+TextName(j)].Data
			for i := range ext {
				ext[i] = a*ext[i] + (1-a)*target[i]
			}
		}
		step1 := tensor.Named{}
		for name, v := range out {
			if p, ok := strings.CutPrefix(name, "step1."); ok {
				step1[p] = v
			}
		}
		methodtest.SameNamed(t, fmt.Sprintf("step1 with %v", c.sets), step1, P)
		if slices.Equal(step1[TextName(1)].Data, f.Params[TextName(1)].Data) {
			t.Errorf("%v: the own prompt did not move", c.sets)
		}
	}
}

// TestFixtureStepOutputs: the step's outputs agree with each other and with
// the inference path: loss = CE(logits) + λ·CE(scores, domain), the weights
// are the softmax of the scores, the logits those Learner.Logits gives with
// the EMA'd parameters, and they scale with the logit multiplier.
func TestFixtureStepOutputs(t *testing.T) {
	f := stepFixture(true)
	out := runStep(t, f)
	const B, n, C = 3, fixDomains, fixClasses
	labels := f.Ints["labels"]
	ce := func(x []float32, k, y int) float64 {
		mx := math.Inf(-1)
		for _, v := range x[:k] {
			mx = math.Max(mx, float64(v))
		}
		var s float64
		for _, v := range x[:k] {
			s += math.Exp(float64(v) - mx)
		}
		return math.Log(s) + mx - float64(x[y])
	}
	var lce, ldom float64
	for b := 0; b < B; b++ {
		lce += ce(out["logits"].Data[b*C:], C, labels[b]) / B
		ldom += ce(out["domain_scores"].Data[b*n:], n, 1) / B
		var sum float64
		for i := 0; i < n; i++ {
			sum += float64(out["domain_weights"].Data[b*n+i])
		}
		if math.Abs(sum-1) > 1e-6 {
			t.Errorf("image %d: domain weights sum to %g", b, sum)
		}
	}
	near := func(what string, got, want float64) {
		if math.Abs(got-want) > 1e-5*(1+math.Abs(want)) {
			t.Errorf("%s = %.7g, want %.7g", what, got, want)
		}
	}
	near("loss_ce", float64(out["loss_ce"].Data[0]), lce)
	near("loss_dom", float64(out["loss_dom"].Data[0]), ldom)
	near("loss", float64(out["loss"].Data[0]), lce+0.7*ldom)

	// inference on the stepped-from parameters (step1's external prompts
	// are the EMA'd ones; the trained ones are taken from before the step)
	P := tensor.Named{}
	for name, v := range out {
		if p, ok := strings.CutPrefix(name, "step1."); ok {
			P[p] = v
			if _, trained := out["grad."+p]; trained {
				P[p] = f.Params[p]
			}
		}
	}
	m, err := fixtureModel(f)
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := settingsFrom(f)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLearner(m, f.Ints["tokens"], s.config(n, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TextFeatures(P); err != nil {
		t.Fatal(err)
	}
	lg, w, err := l.Logits(P, clip.ImagePrefix(m, 1, f.Batch["images"].Data, B, nil), B)
	if err != nil {
		t.Fatal(err)
	}
	for i := range lg {
		near(fmt.Sprintf("logits[%d] (inference)", i), float64(lg[i]), float64(out["logits"].Data[i]))
	}
	for i := range w {
		near(fmt.Sprintf("domain_weights[%d] (inference)", i), float64(w[i]), float64(out["domain_weights"].Data[i]))
	}

	f.Meta["logit_scale"] = "2"
	out2 := runStep(t, f)
	for i, v := range out["logits"].Data {
		near(fmt.Sprintf("logits[%d] at logit_scale 2", i), float64(out2["logits"].Data[i]), float64(v)*math.E)
	}
}

// roundFixture is a round on tinyModel: two domains, three clients of
// domains 0, 1, 1
// (client 0 by default, client 1 by an integer tensor, client 2 by the
// metadata), two epochs of batches of 4.
func roundFixture(ada bool) *parity.Fixture {
	m := tinyModel()
	rng := rand.New(rand.NewPCG(31, 4))
	f := &parity.Fixture{Model: m, Params: fixtureParams(m, 2, ada, 6), Batch: tensor.Named{},
		Ints: map[string][]int{"tokens": tinyTokens(m, fixNCtx, fixClasses), "client1.domain": {1}},
		Meta: map[string]string{"lr": "0.01", "weight_decay": "0.05", "tau": "0.5", "ema": "0.9",
			"batch_size": "4", "local_epochs": "2", "seed": "3", "client2.domain": "1"}}
	for i, N := range []int{6, 5, 7} {
		f.Batch[fmt.Sprintf("client%d.images", i)] = &tensor.Tensor{Shape: []int{N, 3, 8, 8}, Data: gradcheck.Rand(rng, N*3*8*8, 1)}
		var labels []int
		for k := 0; k < N; k++ {
			labels = append(labels, rng.IntN(fixClasses))
		}
		f.Ints[fmt.Sprintf("client%d.labels", i)] = labels
	}
	return f
}

// TestFixtureRoundMatchesPlan: `pfedmma round` (parity.RunRound, which
// picks ADAPT's Rounder) equals one round of the production plan driven by
// hand on the same clients, bit for bit; global.* relays each domain's
// uploaded prompt (the mean of its clients' uploads) and averages the
// visual prompts and AdaLN.
func TestFixtureRoundMatchesPlan(t *testing.T) {
	for _, ada := range []bool{false, true} {
		f := roundFixture(ada)
		got, err := parity.RunRound(context.Background(), Method{}, f)
		if err != nil {
			t.Fatal(err)
		}

		// by hand: the same env, the plan's strategy and clients
		s := DefaultSettings()
		s.NCtx, s.LR, s.WeightDecay, s.Tau, s.EMA, s.AdaLN, s.AdaLNLayers = fixNCtx, 0.01, 0.05, 0.5, 0.9, ada, 2
		opts, err := f.TrainOptions()
		if err != nil {
			t.Fatal(err)
		}
		var clients []parity.TensorClient
		for i := 0; i < 3; i++ {
			clients = append(clients, parity.TensorClient{Pixels: f.Batch[fmt.Sprintf("client%d.images", i)].Data,
				Labels: f.Ints[fmt.Sprintf("client%d.labels", i)]})
		}
		env, err := parity.TensorEnv(f.Model, 1, f.Ints["tokens"], fixClasses, clients, opts, 3)
		if err != nil {
			t.Fatal(err)
		}
		defer env.TrainStore.Close()
		doms := []int{0, 1, 1}
		for i, d := range doms {
			env.Task.Clients[i].Domain = d
		}
		env.Init = f.Params
		plan, err := Method{}.Build(env, s)
		if err != nil {
			t.Fatal(err)
		}
		var infos []federation.ClientInfo
		for _, c := range plan.Clients {
			infos = append(infos, federation.ClientInfo{ID: c.ID(), NumExamples: c.NumExamples()})
		}
		if err := plan.Strategy.Init(infos); err != nil {
			t.Fatal(err)
		}
		round(t, plan, 0)
		want := tensor.Named{}
		for i := range plan.Clients {
			for k, v := range plan.Clients[i].(*client.Client).P {
				want[fmt.Sprintf("client%d.trained.%s", i, k)] = v
			}
		}
		for k, v := range plan.Global() {
			want["global."+k] = v
		}
		methodtest.SameNamed(t, fmt.Sprintf("round (adaln %v)", ada), got, want)

		// relayed prompts: each domain's uploads; averaged: every client's
		up := func(i int, name string) *tensor.Tensor { return got[fmt.Sprintf("client%d.trained.%s", i, name)] }
		methodtest.SameNamed(t, "global text prompt of domain 0",
			tensor.Named{"x": got["global."+TextName(0)]}, tensor.Named{"x": up(0, TextName(0))})
		methodtest.SameNamed(t, "global text prompt of domain 1",
			tensor.Named{"x": got["global."+TextName(1)]}, tensor.Named{"x": mean64(up(1, TextName(1)), up(2, TextName(1)))})
		for name := range f.Params {
			if !Averaged(name) {
				continue
			}
			avg := mean64(up(0, name), up(1, name), up(2, name))
			for i, v := range got["global."+name].Data {
				if math.Abs(float64(v-avg.Data[i])) > 1e-7*(1+math.Abs(float64(v))) {
					t.Fatalf("global.%s[%d] = %g, want the clients' mean %g", name, i, v, avg.Data[i])
				}
			}
		}
		if slices.Equal(up(0, TextName(0)).Data, f.Params[TextName(0)].Data) {
			t.Error("client 0's prompt did not train")
		}
		if !slices.Equal(up(0, TextName(1)).Data, f.Params[TextName(1)].Data) {
			t.Error("client 0's copy of domain 1 moved in round 0 (no EMA target yet)")
		}
	}
}

// mean64 is the element-wise mean accumulated in float64.
func mean64(ts ...*tensor.Tensor) *tensor.Tensor {
	out := tensor.New(ts[0].Shape...)
	for i := range out.Data {
		var s float64
		for _, t := range ts {
			s += float64(t.Data[i])
		}
		out.Data[i] = float32(s / float64(len(ts)))
	}
	return out
}

// TestFixtureFiles: the files `pfedmma step`/`round` read (methods.
// LoadFixture: an I64 domain tensor, --set overrides) give the same
// results as the in-memory fixtures.
func TestFixtureFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, f32 tensor.Named, ints map[string][]int, meta map[string]string) string {
		i64 := map[string]safetensors.Int64Tensor{}
		for k, v := range ints {
			d := make([]int64, len(v))
			for i, x := range v {
				d[i] = int64(x)
			}
			i64[k] = safetensors.Int64Tensor{Shape: []int{len(v)}, Data: d}
		}
		p := filepath.Join(dir, name)
		if err := safetensors.Write(p, f32, i64, meta); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, kind := range []string{"step", "round"} {
		var f *parity.Fixture
		if kind == "step" {
			f = stepFixture(true)
		} else {
			f = roundFixture(true)
		}
		// the batch file lacks the domain metadata (client2.domain) that
		// --set gives; lr in the params file is overridden by the batch's
		meta := f.Meta
		sets := []string{}
		if kind == "round" {
			sets = append(sets, "client2.domain=1")
		}
		bm := map[string]string{}
		for k, v := range meta {
			if k != "client2.domain" {
				bm[k] = v
			}
		}
		params := write(kind+"-params.safetensors", f.Params, nil, map[string]string{"lr": "7"})
		batch := write(kind+"-batch.safetensors", f.Batch, f.Ints, bm)
		g, err := parity.Load(f.Model, params, []string{batch}, sets)
		if err != nil {
			t.Fatal(err)
		}
		var want, got tensor.Named
		if kind == "step" {
			want, got = runStep(t, f), runStep(t, g)
		} else {
			if want, err = parity.RunRound(context.Background(), Method{}, f); err != nil {
				t.Fatal(err)
			}
			if got, err = parity.RunRound(context.Background(), Method{}, g); err != nil {
				t.Fatal(err)
			}
		}
		methodtest.SameNamed(t, kind+" from files", got, want)
	}
}

// TestFixtureRejects: inputs that do not fit are errors naming the problem.
func TestFixtureRejects(t *testing.T) {
	for _, c := range []struct {
		name, want string
		edit       func(f *parity.Fixture)
		round      bool
	}{
		{"domain out of range", "domain 3 outside", func(f *parity.Fixture) { f.Meta["domain"] = "3" }, false},
		{"EMA target for the own domain", "no EMA target", func(f *parity.Fixture) {
			f.Params[EMATargetPrefix+TextName(1)] = f.Params[TextName(1)].Clone()
		}, false},
		{"unknown parameter", "not one of ADAPT's", func(f *parity.Fixture) { f.Params["text_prompt.7"] = tensor.New(2, 8) }, false},
		{"visual prompts of another n", `"visual_prompt" of shape [3 8]`, func(f *parity.Fixture) { f.Params[ParamVisual] = tensor.New(2, 8) }, false},
		{"n_ctx disagrees", "n_ctx=4", func(f *parity.Fixture) { f.Meta["n_ctx"] = "4" }, false},
		{"bad optimizer", "optimizer", func(f *parity.Fixture) { f.Meta["optimizer"] = "adam" }, false},
		{"label out of range", "label 4", func(f *parity.Fixture) { f.Ints["labels"][0] = 4 }, false},
		{"domain without a client", "no client has domain 1", func(f *parity.Fixture) {
			f.Meta["client2.domain"] = "0"
			f.Ints["client1.domain"] = []int{0}
		}, true},
		{"EMA target in a round", "belong to a step", func(f *parity.Fixture) {
			f.Batch[EMATargetPrefix+TextName(0)] = f.Params[TextName(0)].Clone()
		}, true},
		{"client domain out of range", "domain 5 outside", func(f *parity.Fixture) {
			f.Meta["client2.domain"] = "5"
		}, true},
	} {
		var f *parity.Fixture
		var err error
		if c.round {
			f = roundFixture(false)
			c.edit(f)
			_, err = Method{}.FixtureRound(context.Background(), f)
		} else {
			f = stepFixture(false)
			c.edit(f)
			_, err = Method{}.Step(context.Background(), f)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}
