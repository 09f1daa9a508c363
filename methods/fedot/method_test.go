package fedot

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/pfedmma/pfedmma/actcache"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/prefixcache"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

// featureEnv is an Env over synthetic cached image features [d]: K classes
// (unit class means plus noise), clients with n training and n test images
// each, labelled over one space of all classes; w_g starts from the class
// means' directions perturbed (given as env.Init, so no text encoder runs).
func featureEnv(t testing.TB, d, K, clients, n int, opts train.Options) *methods.Env {
	rng := rand.New(rand.NewPCG(42, uint64(d)))
	w := &clip.Weights{Config: clip.Config{EmbedDim: d}, LogitScale: float32(math.Log(100))}
	model := &clip.Model{W: w}
	names := make([]string, K)
	all := make([]int, K)
	for c := range names {
		names[c], all[c] = fmt.Sprintf("class%d", c), c
	}
	means := make([]float32, K*d)
	for i := range means {
		means[i] = float32(rng.NormFloat64())
	}
	normalizeRows(nil, means, K, d)
	task := &protocol.Task{Protocol: protocol.Dirichlet, Dataset: &dataset.Dataset{Name: "features", Classes: names},
		Spaces: []protocol.Space{{Name: "all", Classes: all}}, Metrics: []string{"acc"}}
	store, err := actcache.New(actcache.Options{RecordLen: d, MemoryBudget: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	env := &methods.Env{Model: model, Task: task, Start: methods.Features, Seed: 7, Train: opts,
		Prefixer: &prefixcache.Prefixer{Model: model, Start: methods.Features}, TrainStore: store, TestStore: store,
		TrainRecs: map[int][]int{}, TestRecs: map[int]int{},
		Evaluator: &eval.Evaluator{Source: store, RecordLen: d, Batch: 100}}
	rec := make([]float32, d)
	feature := func(key string, c int, shift []float32) int {
		for k := range rec {
			rec[k] = means[c*d+k] + shift[k] + float32(rng.NormFloat64()*1.5/math.Sqrt(float64(d)))
		}
		r, err := store.Put(key, rec)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for id := 0; id < clients; id++ {
		shift := make([]float32, d) // the client's domain shift
		for k := range shift {
			shift[k] = float32(rng.NormFloat64() * 0.5 / math.Sqrt(float64(d)))
		}
		ct := protocol.ClientTask{ID: id}
		ev := &protocol.EvalSet{Name: "acc"}
		for k := 0; k < n; k++ {
			c := rng.IntN(K)
			item := len(task.Train)
			task.Train = append(task.Train, dataset.Item{Key: fmt.Sprintf("train/%d/%d", id, k), Label: c})
			env.TrainRecs[item] = []int{feature(task.Train[item].Key, c, shift)}
			ct.Train, ct.Labels = append(ct.Train, item), append(ct.Labels, c)
			c = rng.IntN(K)
			item = len(task.Test)
			task.Test = append(task.Test, dataset.Item{Key: fmt.Sprintf("test/%d/%d", id, k), Label: c})
			env.TestRecs[item] = feature(task.Test[item].Key, c, shift)
			ev.Images, ev.Labels = append(ev.Images, item), append(ev.Labels, c)
		}
		ct.Evals = []*protocol.EvalSet{ev}
		task.Clients = append(task.Clients, ct)
	}
	wg := tensor.New(K, d)
	for i := range wg.Data {
		wg.Data[i] = means[i] + float32(rng.NormFloat64()*0.5/math.Sqrt(float64(d)))
	}
	normalizeRows(nil, wg.Data, K, d)
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

// coordinator runs plan's clients in Sites whose state lives under dir.
func coordinator(plan *methods.Plan, dir string, rounds int) *federation.Coordinator {
	proxies := make([]federation.ClientProxy, len(plan.Clients))
	for i, c := range plan.Clients {
		proxies[i] = federation.NewSite(c, filepath.Join(dir, fmt.Sprintf("site-%d", c.ID())))
	}
	return &federation.Coordinator{Strategy: plan.Strategy, Proxies: proxies, Rounds: rounds, Fraction: 0.6, Seed: 3,
		EvalEvery: 1, Store: federation.FileStore{Path: filepath.Join(dir, federation.CheckpointFile)},
		Logger: slog.New(slog.DiscardHandler)}
}

func bitsEqual(a, b tensor.Named) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%d names vs %d", len(a), len(b))
	}
	for k, x := range a {
		y, ok := b[k]
		if !ok || !tensor.SameShape(x.Shape, y.Shape) {
			return k + ": missing or shape"
		}
		for i := range x.Data {
			if math.Float32bits(x.Data[i]) != math.Float32bits(y.Data[i]) {
				return k
			}
		}
	}
	return ""
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
			ref := build()
			refHist, err := coordinator(ref, t.TempDir(), 3).Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if _, err := coordinator(build(), dir, 2).Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			resumed := build()
			hist, err := coordinator(resumed, dir, 3).Resume(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			last, want := hist.Rounds[len(hist.Rounds)-1], refHist.Rounds[2]
			if fmt.Sprint(last.Eval) != fmt.Sprint(want.Eval) || fmt.Sprint(last.Fit) != fmt.Sprint(want.Fit) {
				t.Errorf("round 2 metrics differ:\n got %v %v\nwant %v %v", last.Fit, last.Eval, want.Fit, want.Eval)
			}
			for i := range ref.Clients {
				a, _ := resumed.Clients[i].State()
				b, _ := ref.Clients[i].State()
				if d := bitsEqual(a, b); d != "" {
					t.Errorf("client %d state differs at %s", i, d)
				}
			}
			if d := bitsEqual(resumed.Strategy.State(), ref.Strategy.State()); d != "" {
				t.Errorf("strategy state differs at %s", d)
			}
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
		co := coordinator(plan, t.TempDir(), 4)
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
			c := cl.(*Client)
			w, err := c.w.LocalMatrix(c.P)
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
