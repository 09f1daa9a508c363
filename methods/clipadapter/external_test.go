package clipadapter

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
)

// The external fixtures of testdata/clip_adapter come from the authors'
// code (gaopengcuhk/CLIP-Adapter, reference/clipadapter), federated
// with the pFedMMA authors' average_weights. These tests run them through
// the production client (Client.Step for the loss and gradients,
// Client.Fit for the optimizer step) and the production round (the
// method's Plan in federation Sites under a federation.Coordinator), never
// through the fixture contract's replay (fixture.go's step, parity.Round).

const extDir = paritytest.Testdata + "clip_adapter/"

// extFixture loads init.safetensors with one of the external files.
func extFixture(t *testing.T, file string) *parity.Fixture {
	t.Helper()
	f, err := parity.Load(paritytest.Model(t), extDir+"init.safetensors", []string{extDir + file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// metaFloat reads a metadata number of the fixture, failing the test.
func metaFloat(t *testing.T, f *parity.Fixture, key string) float64 {
	t.Helper()
	x, err := strconv.ParseFloat(f.Meta[key], 64)
	if err != nil {
		t.Fatalf("fixture metadata %s=%q: %v", key, f.Meta[key], err)
	}
	return x
}

// extSettings are the fixture's ratio and reduction.
func extSettings(t *testing.T, f *parity.Fixture) *Settings {
	return &Settings{Ratio: metaFloat(t, f, "ratio"), Reduction: int(metaFloat(t, f, "reduction"))}
}

// extOptions are the fixture's SGD settings: a fresh optimizer, batches in
// stored order.
func extOptions(t *testing.T, f *parity.Fixture, batch int) train.Options {
	return train.Options{Optimizer: "sgd", LR: metaFloat(t, f, "lr"), Momentum: metaFloat(t, f, "momentum"),
		WD: metaFloat(t, f, "weight_decay"), Batch: batch, Epochs: 1, InOrder: true, ResetOptimizer: true}
}

// extPlan builds the production Plan on clients with the fixture's class
// prompts and initial adapter.
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

// updateTol is the tolerance of an update p − init relative to its largest
// entry: base, or the float32 rounding of the stored p (4 ulps of max|p|)
// relative to the update where that is larger.
func updateTol(p, init []float32, base float64) float64 {
	var pm, um float64
	for i, v := range p {
		pm = math.Max(pm, math.Abs(float64(v)))
		um = math.Max(um, math.Abs(float64(v-init[i])))
	}
	ulp := float64(math.Nextafter32(float32(pm), float32(math.Inf(1))) - float32(pm))
	return math.Max(base, 4*ulp/um)
}

// checkTrained compares trained parameters with the reference's, values and
// updates from init.
func checkTrained(t *testing.T, name string, got, want, init []float32) {
	t.Helper()
	tensortest.RelMax(t, name, got, want, 1e-5)
	u, uref := make([]float32, len(got)), make([]float32, len(got))
	for i := range got {
		u[i], uref[i] = got[i]-init[i], want[i]-init[i]
	}
	tol := updateTol(want, init, 1e-4)
	if tol > 0.02 {
		t.Fatalf("%s: the update is within float32 rounding of the parameters (tolerance %.3g): it checks nothing", name, tol)
	}
	tensortest.RelMax(t, "update "+name, u, uref, tol)
}

func allItems(n int) []int {
	items := make([]int, n)
	for i := range items {
		items[i] = i
	}
	return items
}

// TestExternalStep: the production Client.Step reproduces the authors'
// loss and the gradient of each matrix, and the production Client.Fit (one
// local epoch of one batch, the run's SGD) their parameters after one step.
func TestExternalStep(t *testing.T) {
	f := extFixture(t, "step.safetensors")
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
	plan := extPlan(t, f, s, clients, opts)
	c := plan.Clients[0].(*client.Client)
	loss, _, err := c.Step(context.Background(), train.Batch{Items: allItems(B), RNG: rand.New(rand.NewPCG(0, 0))})
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
		t.Errorf("%d trained tensors, want W1 and W2", n)
	}
	// the optimizer step of the production loop
	c = extPlan(t, f, s, clients, opts).Clients[0].(*client.Client)
	if _, err := c.Fit(context.Background(), federation.FitIns{Params: f.Params.Clone()}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{ParamW1, ParamW2} {
		checkTrained(t, "step1."+name, c.P[name].Data, f.Batch["step1."+name].Data, f.Params[name].Data)
	}
}

// TestExternalRound: one round of the production Plan, two clients in
// federation Sites under the Coordinator, reproduces each client's trained
// adapter and the server's average of the reference's round.
func TestExternalRound(t *testing.T) {
	f := extFixture(t, "round.safetensors")
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
	opts := extOptions(t, f, int(metaFloat(t, f, "batch_size")))
	opts.Epochs = int(metaFloat(t, f, "local_epochs"))
	plan := extPlan(t, f, s, clients, opts)
	runRound(t, plan)
	for i := range clients {
		site, err := plan.Site(i)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{ParamW1, ParamW2} {
			key := fmt.Sprintf("client%d.trained.%s", i, name)
			checkTrained(t, key, site[name].Data, f.Batch[key].Data, f.Params[name].Data)
		}
	}
	g := plan.Global()
	for _, name := range []string{ParamW1, ParamW2} {
		checkTrained(t, "global."+name, g[name].Data, f.Batch["global."+name].Data, f.Params[name].Data)
	}
}

// runRound runs one round of plan: its clients in federation Sites, its
// Strategy, the Coordinator (every client, no evaluation).
func runRound(t *testing.T, plan *methods.Plan) {
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
