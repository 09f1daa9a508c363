package cliplora

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/tensortest"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
)

// The external fixtures of testdata/clip_lora come from the authors' code
// (MaxZanella/CLIP-LoRA's loralib and the step of lora.py's run_lora, on
// the tiny CLIP; reference/cliplora), federated with the pFedMMA
// authors' average_weights. These tests run them through the production
// client (client.Step for the loss and gradients, client.Fit for the
// optimizer step) and the production round (the Plan in federation Sites
// under a federation.Coordinator), never through parity.LearnerStep or
// parity.Round.

const extDir = paritytest.Testdata + "clip_lora/"

// extFixture loads a parameters file with one of the external files.
func extFixture(t *testing.T, params, file string) *parity.Fixture {
	t.Helper()
	f, err := parity.Load(paritytest.Model(t), extDir+params, []string{extDir + file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// extMeta reads a metadata number of the fixture, failing the test.
func extMeta(t *testing.T, f *parity.Fixture, key string) float64 {
	t.Helper()
	x, err := strconv.ParseFloat(f.Meta[key], 64)
	if err != nil {
		t.Fatalf("fixture metadata %s=%q: %v", key, f.Meta[key], err)
	}
	return x
}

// extTrained compares trained parameters with the reference's, values
// (1e-4: a factor B that starts at 0 is its update) and updates from init;
// the update's tolerance is 1e-4, or the float32 rounding of the stored p
// (4 ulps of max|p|) relative to the update where that is larger.
func extTrained(t *testing.T, name string, got, want, init []float32) {
	t.Helper()
	tensortest.RelMax(t, name, got, want, 1e-4)
	u, uref := make([]float32, len(got)), make([]float32, len(got))
	var pm, um float64
	for i := range got {
		u[i], uref[i] = got[i]-init[i], want[i]-init[i]
		pm = math.Max(pm, math.Abs(float64(want[i])))
		um = math.Max(um, math.Abs(float64(uref[i])))
	}
	ulp := float64(math.Nextafter32(float32(pm), float32(math.Inf(1))) - float32(pm))
	tol := math.Max(1e-4, 4*ulp/um)
	if tol > 0.02 {
		t.Fatalf("%s: the update is within float32 rounding of the parameters (tolerance %.3g): it checks nothing", name, tol)
	}
	tensortest.RelMax(t, "update "+name, u, uref, tol)
}

// extRound runs one round of plan: its clients in federation Sites, its
// Strategy, the Coordinator (every client, no evaluation).
func extRound(t *testing.T, plan *methods.Plan) {
	t.Helper()
	proxies := make([]federation.ClientProxy, len(plan.Clients))
	for i, c := range plan.Clients {
		proxies[i] = federation.NewSite(c, "")
	}
	coord := &federation.Coordinator{Strategy: plan.Strategy, Proxies: proxies, Rounds: 1, Fraction: 1,
		Seed: 1, NoEvaluate: true, Logger: slog.New(slog.DiscardHandler)}
	if _, err := coord.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// extSettings are the fixture's LoRA settings (dropout 0: the masks are
// random); the optimizer is the run's (extOptions).
func extSettings(t *testing.T, f *parity.Fixture) *Settings {
	s := &Settings{Rank: int(extMeta(t, f, "rank")), Alpha: extMeta(t, f, "alpha"), Dropout: extMeta(t, f, "dropout"),
		Scale: f.Meta["scale"], Aggregate: f.Meta["aggregate"]}
	if s.Dropout != 0 || s.Scale != "sqrt" || s.Aggregate != AggregateAB {
		t.Fatalf("fixture settings %+v", s)
	}
	return s
}

// extOptions are the fixture's optimizer (AdamW or SGD): a fresh one,
// batches in stored order.
func extOptions(t *testing.T, f *parity.Fixture, batch int) train.Options {
	return train.Options{Optimizer: f.Meta["optimizer"], LR: extMeta(t, f, "lr"), Momentum: extMeta(t, f, "momentum"),
		WD: extMeta(t, f, "weight_decay"), Batch: batch, Epochs: 1, InOrder: true, ResetOptimizer: true}
}

// extPlan builds the production Plan on clients with the fixture's class
// prompts and initial factors.
func extPlan(t *testing.T, f *parity.Fixture, s *Settings, clients []parity.TensorClient, opts train.Options) *methods.Plan {
	t.Helper()
	tokens, C, err := f.ClassTokens()
	if err != nil {
		t.Fatal(err)
	}
	depth, err := Method{}.Depth(s, 4)
	if err != nil {
		t.Fatal(err)
	}
	env, err := parity.TensorEnv(f.Model, depth, tokens, C, clients, opts, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.TrainStore.Close() })
	env.Init = f.Params
	plan, err := Method{}.Build(env, s)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// extGrad compares a gradient with the reference's, relative to the
// tensor's largest entry; a reference that is exactly zero (A while B = 0)
// must be zero.
func extGrad(t *testing.T, name string, got, want []float32) {
	t.Helper()
	zero := true
	for _, v := range want {
		zero = zero && v == 0
	}
	if !zero {
		tensortest.RelMax(t, name, got, want, 1e-4)
		return
	}
	for i, v := range got {
		if v != 0 {
			t.Errorf("%s[%d] = %g, the reference's is zero (B = 0)", name, i, v)
			return
		}
	}
}

// extAdam compares the update p − init of AdamW's first step, −lr·(g/(|g| +
// eps) + wd·init), with the reference's entry by entry: within 1e-4 of the
// largest update, plus what a gradient error δ the gradient check admits
// (1e-4 of max|g|) moves an entry through g/(|g| + eps), lr·eps·δ/(|g| +
// eps)² — large only where |g| is within a few hundred eps of 0.
func extAdam(t *testing.T, name string, got, want, init, g []float32, lr float64) {
	t.Helper()
	const eps = 1e-8
	var um, gm float64
	for i := range want {
		um = math.Max(um, math.Abs(float64(want[i]-init[i])))
		gm = math.Max(gm, math.Abs(float64(g[i])))
	}
	worst := 0.0
	for i := range want {
		d := math.Abs(float64(got[i]-init[i]) - float64(want[i]-init[i]))
		ga := math.Abs(float64(g[i])) + eps
		tol := 1e-4*um + lr*eps*1e-4*gm/(ga*ga)
		if d > tol {
			t.Errorf("%s[%d]: update %.6g, the reference's %.6g (gradient %.3g), tolerance %.3g", name, i, got[i]-init[i], want[i]-init[i], g[i], tol)
			return
		}
		worst = math.Max(worst, d/um)
	}
	t.Logf("update %s: rel %.2g", name, worst)
}

// TestExternalStep: the production client's Step reproduces the authors'
// loss and the gradient of every A and B (from their initialisation, B = 0,
// and from a random B), and its Fit (one local epoch of one batch) their
// factors after one step of their AdamW, or of SGD.
func TestExternalStep(t *testing.T) {
	for _, c := range []struct{ init, step string }{
		{"init", "step"}, {"init_rand", "step_rand"}, {"init_rand_sgd", "step_rand_sgd"},
	} {
		t.Run(c.step, func(t *testing.T) {
			f := extFixture(t, c.init+".safetensors", c.step+".safetensors")
			if f.Meta["params"] != c.init+".safetensors" {
				t.Fatalf("%s made from %q", c.step, f.Meta["params"])
			}
			s := extSettings(t, f)
			images, err := f.Tensor("images")
			if err != nil {
				t.Fatal(err)
			}
			labels, err := f.IntsOf("labels")
			if err != nil {
				t.Fatal(err)
			}
			B := len(labels)
			clients := []parity.TensorClient{{Pixels: images.Data, Labels: labels}}
			opts := extOptions(t, f, B)
			cl := extPlan(t, f, s, clients, opts).Clients[0].(*client.Client)
			items := make([]int, B)
			for i := range items {
				items[i] = i
			}
			loss, _, err := cl.Step(context.Background(), train.Batch{Items: items, RNG: rand.New(rand.NewPCG(0, 0))})
			if err != nil {
				t.Fatal(err)
			}
			tensortest.RelMax(t, "loss", []float32{float32(loss)}, f.Batch["loss"].Data, 1e-5)
			n := 0
			for _, p := range cl.Params() {
				extGrad(t, "grad."+p.Name, p.Grad, f.Batch["grad."+p.Name].Data)
				n++
			}
			if n != 48 {
				t.Errorf("%d trained tensors, want A and B of q, k, v in 4+4 blocks", n)
			}
			cl = extPlan(t, f, s, clients, opts).Clients[0].(*client.Client)
			if _, err := cl.Fit(context.Background(), federation.FitIns{Params: f.Params.Clone()}); err != nil {
				t.Fatal(err)
			}
			for name, p := range cl.P {
				if g := f.Batch["grad."+name].Data; slices.Max(g) == 0 && slices.Min(g) == 0 {
					// weight decay alone moves A (B = 0): within the rounding of A
					tensortest.RelMax(t, "step1."+name, p.Data, f.Batch["step1."+name].Data, 1e-6)
					continue
				}
				if opts.Optimizer == "adamw" {
					extAdam(t, "step1."+name, p.Data, f.Batch["step1."+name].Data, f.Params[name].Data, f.Batch["grad."+name].Data, opts.LR)
					continue
				}
				extTrained(t, "step1."+name, p.Data, f.Batch["step1."+name].Data, f.Params[name].Data)
			}
		})
	}
}

// TestExternalRound: one round of the production Plan, two clients in
// federation Sites under the Coordinator, reproduces each client's trained
// factors and the server's FedAvg (n_i / n) of A and B.
func TestExternalRound(t *testing.T) {
	f := extFixture(t, "init_rand.safetensors", "round.safetensors")
	if f.Meta["params"] != "init_rand.safetensors" {
		t.Fatalf("round made from %q", f.Meta["params"])
	}
	s := extSettings(t, f)
	var clients []parity.TensorClient
	for i := 0; i < 2; i++ {
		px, err := f.Tensor(fmt.Sprintf("client%d.images", i))
		if err != nil {
			t.Fatal(err)
		}
		labels, err := f.IntsOf(fmt.Sprintf("client%d.labels", i))
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, parity.TensorClient{Pixels: px.Data, Labels: labels})
	}
	opts := extOptions(t, f, int(extMeta(t, f, "batch_size")))
	opts.Epochs = int(extMeta(t, f, "local_epochs"))
	plan := extPlan(t, f, s, clients, opts)
	extRound(t, plan)
	for i := range clients {
		site, err := plan.Site(i)
		if err != nil {
			t.Fatal(err)
		}
		for name, p := range site {
			key := fmt.Sprintf("client%d.trained.%s", i, name)
			extTrained(t, key, p.Data, f.Batch[key].Data, f.Params[name].Data)
		}
	}
	g := plan.Global()
	if len(g) != 48 {
		t.Errorf("the server holds %d tensors, want every A and B", len(g))
	}
	for name, v := range g {
		extTrained(t, "global."+name, v.Data, f.Batch["global."+name].Data, f.Params[name].Data)
	}
}
