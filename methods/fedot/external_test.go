package fedot

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/tensortest"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/parity/paritytest"
	"github.com/pfedmma/pfedmma/tensor"
)

// The external fixtures of testdata/fedot come from an independent float64
// PyTorch FedOT written from the paper (reference/fedot; FedOT has no
// public code): its own Cayley transform (an explicit inverse where this
// package factors by LU), autograd, torch.optim.SGD and the uniform mean.
// These tests run them through the production client (Client.Step for the
// loss and gradients, Client.Fit for the optimizer step) and the
// production round (the Plan in federation Sites under a
// federation.Coordinator), never through fixture.go's replay or
// parity.Round.

const extDir = paritytest.Testdata + "fedot/"

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

// extSettings are the fixture's FedOT settings: blocks and τ.
func extSettings(t *testing.T, f *parity.Fixture) *Settings {
	if f.Meta["variant"] != VariantFedOT || f.Meta["normalize_classifier"] != "false" {
		t.Fatalf("fixture variant %q, normalize_classifier %q", f.Meta["variant"], f.Meta["normalize_classifier"])
	}
	return &Settings{Variant: VariantFedOT, Blocks: int(extMeta(t, f, "blocks")), Init: "text", Tau: extMeta(t, f, "tau")}
}

// extOptions are the fixture's SGD settings: a fresh optimizer, batches in
// stored order.
func extOptions(t *testing.T, f *parity.Fixture, batch int) train.Options {
	return train.Options{Optimizer: "sgd", LR: extMeta(t, f, "lr"), Momentum: extMeta(t, f, "momentum"),
		WD: extMeta(t, f, "weight_decay"), Batch: batch, Epochs: 1, InOrder: true, ResetOptimizer: true}
}

// extPlan builds the production Plan on clients with the fixture's classes
// and initial parameters.
func extPlan(t *testing.T, f *parity.Fixture, s *Settings, clients []parity.TensorClient, opts train.Options) *methods.Plan {
	t.Helper()
	tokens, C, err := f.ClassTokens()
	if err != nil {
		t.Fatal(err)
	}
	env, err := parity.TensorEnv(f.Model, methods.Features, tokens, C, clients, opts, 1)
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

// extTrained compares trained parameters with the reference's, values and
// updates from init; the update's tolerance is base, or the float32
// rounding of the stored p (4 ulps of max|p|) relative to the update where
// that is larger.
func extTrained(t *testing.T, name string, got, want, init []float32) {
	t.Helper()
	tensortest.RelMax(t, name, got, want, 1e-5)
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

// TestExternalStep: for FedOT (one block, X = I) and FedOT(+B) (two blocks,
// X ≠ I), the production Client.Step reproduces the oracle's loss and the
// gradients of w_g and X, and Client.Fit (one local epoch of one batch,
// the run's SGD) their values after one step.
func TestExternalStep(t *testing.T) {
	for _, suffix := range []string{"", "_b2"} {
		t.Run("step"+suffix, func(t *testing.T) {
			f := extFixture(t, "init"+suffix+".safetensors", "step"+suffix+".safetensors")
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
			c := extPlan(t, f, s, clients, opts).Clients[0].(*client.Client)
			items := make([]int, B)
			for i := range items {
				items[i] = i
			}
			loss, _, err := c.Step(context.Background(), train.Batch{Items: items, RNG: rand.New(rand.NewPCG(0, 0))})
			if err != nil {
				t.Fatal(err)
			}
			tensortest.RelMax(t, "loss", []float32{float32(loss)}, f.Batch["loss"].Data, 1e-5)
			n := 0
			for _, p := range c.Params() {
				tensortest.RelMax(t, "grad."+p.Name, p.Grad, f.Batch["grad."+p.Name].Data, 1e-4)
				n++
			}
			if n != 2 {
				t.Errorf("%d trained tensors, want w_g and x", n)
			}
			w1, err := model(c).LocalMatrix(c.P)
			if err != nil {
				t.Fatal(err)
			}
			tensortest.RelMax(t, "w_1", w1, f.Batch["w_1"].Data, 1e-5)
			c = extPlan(t, f, s, clients, opts).Clients[0].(*client.Client)
			// the server sends w_g; the client holds its X (the initial one)
			in := tensor.Named{ParamClassifier: f.Params[ParamClassifier].Clone()}
			if _, err := c.Fit(context.Background(), federation.FitIns{Params: in}); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{ParamClassifier, ParamX} {
				extTrained(t, "step1."+name, c.P[name].Data, f.Batch["step1."+name].Data, f.Params[name].Data)
			}
		})
	}
}

// TestExternalRound: one round of the production Plan, two clients in
// federation Sites under the Coordinator, reproduces each client's trained
// w_g and X and the server's uniform mean of the w_g.
func TestExternalRound(t *testing.T) {
	f := extFixture(t, "init_b2.safetensors", "round.safetensors")
	if f.Meta["params"] != "init_b2.safetensors" {
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
		for _, name := range []string{ParamClassifier, ParamX} {
			key := fmt.Sprintf("client%d.trained.%s", i, name)
			extTrained(t, key, site[name].Data, f.Batch[key].Data, f.Params[name].Data)
		}
	}
	g := plan.Global()
	if len(g) != 1 {
		t.Errorf("the server holds %d tensors, want w_g only", len(g))
	}
	extTrained(t, "global.w_g", g[ParamClassifier].Data, f.Batch["global.w_g"].Data, f.Params[ParamClassifier].Data)
}
