package fedot

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/methodtest"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/tensor"
)

// featureEnv is methodtest's feature Env (with domain shifts) whose
// classifier w_g starts from the class means perturbed, unit rows.
func featureEnv(t testing.TB, d, K, clients, n int, opts train.Options) *methods.Env {
	env, perturbed := methodtest.FeatureEnv(t, d, K, clients, n, opts, true)
	wg := &tensor.Tensor{Shape: []int{K, d}, Data: perturbed}
	clip.NormalizeRows(nil, wg.Data, K, d)
	env.Init = tensor.Named{ParamClassifier: wg}
	return env
}

// initFor completes env.Init with the local parameters' initial values.
func initFor(env *methods.Env, s *Settings) {
	d, K := env.Model.W.Config.EmbedDim, len(env.Task.Dataset.Classes)
	p := tensor.Named{}
	for name, shape := range s.Shapes(d, K) {
		if name != ParamClassifier {
			p[name] = tensor.New(shape...)
		}
	}
	s.initLocal(p, rand.New(rand.NewPCG(1, 1)))
	for k, v := range p {
		env.Init[k] = v
	}
}

func testOpts() train.Options {
	return train.Options{Epochs: 1, Batch: 16, Optimizer: "sgd", LR: 0.01, Momentum: 0.9, WD: 5e-4}
}

// TestResumeBitIdentical: 2 rounds, a checkpoint, fresh clients and
// strategy, 1 more round equals 3 straight rounds bit for bit (client
// states, server state, metrics), for every variant.
func TestResumeBitIdentical(t *testing.T) {
	for _, s := range []*Settings{
		{Variant: VariantFedOT, Blocks: 1, Init: "text"},
		{Variant: VariantFedOT, Blocks: 4, Init: "text"},
		{Variant: VariantFedLT, Blocks: 1, Init: "text"},
		{Variant: VariantFedAdapter, Blocks: 1, Init: "text"},
		{Variant: VariantAllGlobal, Blocks: 2, Init: "text"},
		{Variant: VariantAllLocal, Blocks: 1, Init: "text"},
	} {
		t.Run(fmt.Sprintf("%s-%d", s.Variant, s.Blocks), func(t *testing.T) {
			build := func() *methods.Plan {
				env := featureEnv(t, 16, 5, 4, 24, testOpts())
				initFor(env, s)
				plan, err := Method{}.Build(env, s)
				if err != nil {
					t.Fatal(err)
				}
				return plan
			}
			methodtest.ResumeCoordinator(t, build)
		})
	}
}

// TestTrainingKeepsOrthogonal: after rounds of training at a large learning
// rate, every client's w_1 (r = 1 and r = 4) is orthogonal to 1e-5 and has
// moved away from I; only w_g left the clients.
func TestTrainingKeepsOrthogonal(t *testing.T) {
	for _, r := range []int{1, 4} {
		s := &Settings{Variant: VariantFedOT, Blocks: r, Init: "text"}
		opts := testOpts()
		opts.LR = 0.5
		env := featureEnv(t, 32, 6, 3, 40, opts)
		initFor(env, s)
		plan, err := Method{}.Build(env, s)
		if err != nil {
			t.Fatal(err)
		}
		co := methodtest.Coordinator(plan, t.TempDir(), 4)
		co.Fraction = 1
		hist, err := co.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, rep := range hist.Rounds {
			if rep.BytesUp != int64(len(plan.Clients)*4*6*32) {
				t.Fatalf("round %d uploaded %d bytes, want w_g only", rep.Round, rep.BytesUp)
			}
		}
		for i, cl := range plan.Clients {
			c := cl.(*client.Client)
			w, err := model(c).LocalMatrix(c.P)
			if err != nil {
				t.Fatal(err)
			}
			if e := orthogonalityError(w, 32); e > 1e-5 {
				t.Errorf("r=%d client %d: ‖WᵀW − I‖max = %g after training", r, i, e)
			}
			var moved float64
			for k, v := range w {
				if k/32 == k%32 {
					v--
				}
				moved = math.Max(moved, math.Abs(float64(v)))
			}
			if moved < 1e-3 {
				t.Errorf("r=%d client %d: w_1 stayed at I (max |W − I| %g)", r, i, moved)
			}
		}
	}
}

// BenchmarkRoundViTB32 is one FedOT round at ViT-B/32 shapes (d = 512,
// Office-Home's K = 65) on cached features: 10 clients of 100 images,
// batch 32, one local epoch (the paper's E = 1).
func BenchmarkRoundViTB32(b *testing.B) {
	for _, r := range []int{1, 4} {
		b.Run(fmt.Sprintf("blocks=%d", r), func(b *testing.B) {
			s := &Settings{Variant: VariantFedOT, Blocks: r, Init: "text"}
			opts := train.Options{Epochs: 1, Batch: 32, Optimizer: "sgd", LR: 5e-5, Momentum: 0.9, WD: 5e-4}
			env := featureEnv(b, 512, 65, 10, 100, opts)
			initFor(env, s)
			plan, err := Method{}.Build(env, s)
			if err != nil {
				b.Fatal(err)
			}
			proxies := make([]federation.ClientProxy, len(plan.Clients))
			for i, c := range plan.Clients {
				proxies[i] = federation.NewSite(c, "")
			}
			co := &federation.Coordinator{Strategy: plan.Strategy, Proxies: proxies, Rounds: 1, Fraction: 1, Seed: 1,
				EvalEvery: 1 << 30, Logger: slog.New(slog.DiscardHandler)}
			b.ResetTimer()
			for b.Loop() {
				if _, err := co.Run(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// model is the Model a client's learners share.
func model(c *client.Client) *Model {
	l, err := c.Learner()
	if err != nil {
		panic(err)
	}
	return l.(*learner).m
}
