package adapt

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
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

// The external fixtures of testdata/adapt come from an independent float64
// PyTorch ADAPT written from the paper, the spec and this package's
// documented decisions (reference/adapt; ADAPT has no public code),
// differentiated by autograd, with torch.optim.AdamW. These tests run them
// through the production client (Client.Step for the loss and gradients,
// Client.Fit for the optimizer step) and the production rounds (the Plan in
// federation Sites under a federation.Coordinator), never through
// fixture.go's Step or FixtureRound.

const extDir = paritytest.Testdata + "adapt/"

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

// extTrained compares trained parameters with the reference's: values to
// 1e-4 of max|p|, and updates from init to 3e-4 of the largest update, or
// the float32 rounding of the stored p (4 ulps of max|p|) relative to the
// update where that is larger. (AdamW divides each entry's step by its
// gradient's magnitude, which magnifies the float32 rounding of small
// gradient entries: measured up to 7.5e-5 after two rounds.) A parameter
// the reference left unchanged (another domain's prompt in the first
// round) must be unchanged.
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
	if um == 0 {
		if !slices.Equal(got, init) {
			t.Errorf("%s: changed, the reference's is not", name)
		}
		return
	}
	ulp := float64(math.Nextafter32(float32(pm), float32(math.Inf(1))) - float32(pm))
	tol := math.Max(3e-4, 4*ulp/um)
	if tol > 0.02 {
		t.Fatalf("%s: the update is within float32 rounding of the parameters (tolerance %.3g): it checks nothing", name, tol)
	}
	tensortest.RelMax(t, "update "+name, u, uref, tol)
}

// extSettings are the fixture's ADAPT settings (no AdaLN).
func extSettings(t *testing.T, f *parity.Fixture) *Settings {
	s := DefaultSettings()
	s.NCtx = int(extMeta(t, f, "n_ctx"))
	s.Tau, s.Lambda, s.EMA = extMeta(t, f, "tau"), extMeta(t, f, "lambda"), extMeta(t, f, "ema")
	s.Optimizer, s.LR, s.WeightDecay = f.Meta["optimizer"], extMeta(t, f, "lr"), extMeta(t, f, "weight_decay")
	if (s.Optimizer != "adamw" && s.Optimizer != "sgd") || extMeta(t, f, "logit_scale") != 4 {
		t.Fatalf("fixture optimizer %q, logit_scale %q", s.Optimizer, f.Meta["logit_scale"])
	}
	if _, ok := f.Meta["adaln_layers"]; ok && extMeta(t, f, "adaln_layers") > 0 {
		s.AdaLN, s.AdaLNLayers = true, int(extMeta(t, f, "adaln_layers"))
	}
	return s
}

// extPlan builds the production Plan on clients of the given domains with
// the fixture's class prompts and initial parameters; batches of batch in
// stored order, a fresh optimizer every round.
func extPlan(t *testing.T, f *parity.Fixture, s *Settings, clients []parity.TensorClient, domains []int, batch int) *methods.Plan {
	t.Helper()
	tokens, C, err := f.ClassTokens()
	if err != nil {
		t.Fatal(err)
	}
	opts := train.Options{Batch: batch, Epochs: 1, InOrder: true, ResetOptimizer: true}
	if s.Optimizer == "sgd" { // the run's momentum
		opts.Momentum = extMeta(t, f, "momentum")
	}
	env, err := parity.TensorEnv(f.Model, 1, tokens, C, clients, opts, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.TrainStore.Close() })
	for i, d := range domains {
		env.Task.Clients[i].Domain = d
	}
	env.Init = f.Params
	plan, err := Method{}.Build(env, s)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// stepClients are the step's clients: the step's batch at its domain, one
// image of the step at each other domain (so that the task has every
// domain).
func stepClients(t *testing.T, f *parity.Fixture, domain int) ([]parity.TensorClient, []int) {
	images, err := f.Tensor("images")
	if err != nil {
		t.Fatal(err)
	}
	labels, err := f.IntsOf("labels")
	if err != nil {
		t.Fatal(err)
	}
	n := int(extMeta(t, f, "domains"))
	per := len(images.Data) / len(labels)
	var cs []parity.TensorClient
	var doms []int
	for d := 0; d < n; d++ {
		c := parity.TensorClient{Pixels: images.Data[:per], Labels: labels[:1]}
		if d == domain {
			c = parity.TensorClient{Pixels: images.Data, Labels: labels}
		}
		cs, doms = append(cs, c), append(doms, d)
	}
	return cs, doms
}

// TestExternalStep: for a client of domain 0 (without and with AdaLN), and
// one of domain 1 whose copy of prompt 0 first moves toward a relayed copy
// (the EMA), the production
// Client.Step reproduces the oracle's loss and the gradients of the own
// text prompt and the visual prompts (the other prompt gets none), and
// Client.Fit (one local epoch of one batch, SGD: AdamW's first step is
// blind to the gradient's size; the rounds run AdamW) their values after
// one step.
func TestExternalStep(t *testing.T) {
	for _, c := range []struct{ init, name string }{{"init", "step"}, {"init", "step_ema"}, {"init_adaln", "step_adaln"}} {
		name := c.name
		t.Run(name, func(t *testing.T) {
			f := extFixture(t, c.init+".safetensors", name+".safetensors")
			if f.Meta["params"] != c.init+".safetensors" {
				t.Fatalf("%s made from %q", name, f.Meta["params"])
			}
			s := extSettings(t, f)
			domain := int(extMeta(t, f, "domain"))
			clients, doms := stepClients(t, f, domain)
			B := len(clients[domain].Labels)
			recv := tensor.Named{}
			for k, v := range f.Batch {
				if p, ok := strings.CutPrefix(k, "ema_target."); ok {
					recv[p] = v.Clone()
				}
			}
			if (name == "step_ema") != (len(recv) == 1) {
				t.Fatalf("%s: %d EMA targets", name, len(recv))
			}
			c := extPlan(t, f, s, clients, doms, B).Clients[domain].(*client.Client)
			c.Site.(*site).Recv = recv
			items := make([]int, B)
			for i := range items {
				items[i] = i
			}
			loss, _, err := c.Step(context.Background(), train.Batch{Items: items, RNG: rand.New(rand.NewPCG(0, 0))})
			if err != nil {
				t.Fatal(err)
			}
			tensortest.RelMax(t, "loss", []float32{float32(loss)}, f.Batch["loss"].Data, 1e-5)
			for k := range recv {
				tensortest.RelMax(t, "ema."+k, c.P[k].Data, f.Batch["ema."+k].Data, 1e-6)
			}
			var got []string
			for _, p := range c.Params() {
				tensortest.RelMax(t, "grad."+p.Name, p.Grad, f.Batch["grad."+p.Name].Data, 1e-4)
				got = append(got, p.Name)
			}
			want := []string{TextName(domain), ParamVisual}
			if s.AdaLN {
				for l := 0; l < s.AdaLNLayers; l++ {
					w, b := adaLNNames(l)
					want = append(want, w, b)
				}
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("trained %v, want %v", got, want)
			}
			c = extPlan(t, f, s, clients, doms, B).Clients[domain].(*client.Client)
			c.Site.(*site).Recv = recv
			if _, err := c.Fit(context.Background(), federation.FitIns{Params: tensor.Named{ParamVisual: f.Params[ParamVisual].Clone()}}); err != nil {
				t.Fatal(err)
			}
			for _, name := range got {
				extTrained(t, "step1."+name, c.P[name].Data, f.Batch["step1."+name].Data, f.Params[name].Data)
			}
		})
	}
}

// TestExternalRound: one and two rounds of the production Plan (client i of
// domain i, in federation Sites under the Coordinator: visual prompts
// averaged, text prompts relayed and, in the second round, the other
// domain's copy moved by the EMA toward the relayed one before every step)
// reproduce each client's parameters after its training and the server's
// global model of the oracle's rounds.
func TestExternalRound(t *testing.T) {
	f := extFixture(t, "init.safetensors", "round.safetensors")
	s := extSettings(t, f)
	var clients []parity.TensorClient
	var doms []int
	for i := 0; i < int(extMeta(t, f, "domains")); i++ {
		px, err := f.Tensor(fmt.Sprintf("client%d.images", i))
		if err != nil {
			t.Fatal(err)
		}
		labels, err := f.IntsOf(fmt.Sprintf("client%d.labels", i))
		if err != nil {
			t.Fatal(err)
		}
		d, err := f.IntsOf(fmt.Sprintf("client%d.domain", i))
		if err != nil {
			t.Fatal(err)
		}
		clients, doms = append(clients, parity.TensorClient{Pixels: px.Data, Labels: labels}), append(doms, d[0])
	}
	for r := 1; r <= 2; r++ {
		t.Run(fmt.Sprintf("rounds=%d", r), func(t *testing.T) {
			plan := extPlan(t, f, s, clients, doms, int(extMeta(t, f, "batch_size")))
			extRounds(t, plan, r)
			for i := range clients {
				site, err := plan.Site(i)
				if err != nil {
					t.Fatal(err)
				}
				for name, p := range site {
					key := fmt.Sprintf("round%d.client%d.trained.%s", r-1, i, name)
					extTrained(t, key, p.Data, f.Batch[key].Data, f.Params[name].Data)
				}
			}
			for name, v := range plan.Global() {
				key := fmt.Sprintf("round%d.global.%s", r-1, name)
				extTrained(t, key, v.Data, f.Batch[key].Data, f.Params[name].Data)
			}
		})
	}
}

// extRounds runs rounds rounds of plan: its clients in federation Sites,
// its Strategy, the Coordinator (every client, no evaluation).
func extRounds(t *testing.T, plan *methods.Plan, rounds int) {
	t.Helper()
	proxies := make([]federation.ClientProxy, len(plan.Clients))
	for i, c := range plan.Clients {
		proxies[i] = federation.NewSite(c, "")
	}
	coord := &federation.Coordinator{Strategy: plan.Strategy, Proxies: proxies, Rounds: rounds, Fraction: 1,
		Seed: 1, NoEvaluate: true, Logger: slog.New(slog.DiscardHandler)}
	if _, err := coord.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}
