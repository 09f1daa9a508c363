package methodtest

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
	"github.com/pfedmma/pfedmma/internal/tensortest"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/prefixcache"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/protocol"
)

// FeatureEnv is an Env over synthetic cached image features [d] for the
// methods that train on the frozen model's features: K classes (unit class
// means plus noise), clients with n training and n test images each,
// labelled over one space of all classes; with shift, every client's
// features carry its own domain shift. It returns the class means
// perturbed (unnormalised), for the frozen text features or a classifier
// to start from.
func FeatureEnv(t testing.TB, d, K, clients, n int, opts train.Options, shift bool) (*methods.Env, []float32) {
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
	clip.NormalizeRows(nil, means, K, d)
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
		domain := make([]float32, d) // the client's domain shift
		if shift {
			for k := range domain {
				domain[k] = float32(rng.NormFloat64() * 0.5 / math.Sqrt(float64(d)))
			}
		}
		ct := protocol.ClientTask{ID: id}
		ev := &protocol.EvalSet{Name: "acc"}
		for k := 0; k < n; k++ {
			c := rng.IntN(K)
			item := len(task.Train)
			task.Train = append(task.Train, dataset.Item{Key: fmt.Sprintf("train/%d/%d", id, k), Label: c})
			env.TrainRecs[item] = []int{feature(task.Train[item].Key, c, domain)}
			ct.Train, ct.Labels = append(ct.Train, item), append(ct.Labels, c)
			c = rng.IntN(K)
			item = len(task.Test)
			task.Test = append(task.Test, dataset.Item{Key: fmt.Sprintf("test/%d/%d", id, k), Label: c})
			env.TestRecs[item] = feature(task.Test[item].Key, c, domain)
			ev.Images, ev.Labels = append(ev.Images, item), append(ev.Labels, c)
		}
		ct.Evals = []*protocol.EvalSet{ev}
		task.Clients = append(task.Clients, ct)
	}
	perturbed := make([]float32, K*d)
	for i := range perturbed {
		perturbed[i] = means[i] + float32(rng.NormFloat64()*0.5/math.Sqrt(float64(d)))
	}
	return env, perturbed
}

// Coordinator runs plan's clients in Sites whose state lives under dir:
// rounds rounds, 60% of the clients a round, evaluation every round.
func Coordinator(plan *methods.Plan, dir string, rounds int) *federation.Coordinator {
	proxies := make([]federation.ClientProxy, len(plan.Clients))
	for i, c := range plan.Clients {
		proxies[i] = federation.NewSite(c, filepath.Join(dir, fmt.Sprintf("site-%d", c.ID())))
	}
	return &federation.Coordinator{Strategy: plan.Strategy, Proxies: proxies, Rounds: rounds, Fraction: 0.6, Seed: 3,
		EvalEvery: 1, Store: federation.FileStore{Path: filepath.Join(dir, federation.CheckpointFile)},
		Logger: slog.New(slog.DiscardHandler)}
}

// ResumeCoordinator checks that 2 rounds, a checkpoint, fresh clients and
// strategy and 1 more round equal 3 straight rounds of build's plans bit
// for bit: the last round's metrics, every client's state and the
// strategy's state. It returns the straight plan and the resumed one.
func ResumeCoordinator(t testing.TB, build func() *methods.Plan) (ref, resumed *methods.Plan) {
	t.Helper()
	ref = build()
	refHist, err := Coordinator(ref, t.TempDir(), 3).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := Coordinator(build(), dir, 2).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	resumed = build()
	hist, err := Coordinator(resumed, dir, 3).Resume(context.Background())
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
		if d := tensortest.BitsDiff(a, b); d != "" {
			t.Errorf("client %d state differs at %s", i, d)
		}
	}
	if d := tensortest.BitsDiff(resumed.Strategy.State(), ref.Strategy.State()); d != "" {
		t.Errorf("strategy state differs at %s", d)
	}
	return ref, resumed
}

// FeatureOptions are the local training of the feature methods' tests:
// one epoch of momentum SGD at lr 0.05, batch 16.
func FeatureOptions() train.Options {
	return train.Options{Epochs: 1, Batch: 16, Optimizer: "sgd", LR: 0.05, Momentum: 0.9, WD: 5e-4}
}
