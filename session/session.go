// Package session builds what `pfedmma run`, `serve`, `site` and `bench`
// share: the frozen env a method runs on (the model, the task, the
// prefixer, the stores of frozen records and the evaluator), the method's
// plan with its strategy wrapped as the configuration's aggregation section
// asks, and the coordinator that drives it on the federation's schedule.
// The data flow is setup (data, task, model) → NewEnv (the frozen env) →
// Build (the plan and its coordinator); experiment's run, serve and site
// and the benchmarks drive what Build returns.
package session

import (
	"context"
	"fmt"

	"github.com/pfedmma/pfedmma/actcache"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/prefixcache"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/preprocess"
	"github.com/pfedmma/pfedmma/progress"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tokenizer"
)

// Frozen describes a session's frozen env: the model and tokenizer, the
// task and its prompt template, the cache key (the depth ℓ of the frozen
// records, split records when Split), the seed and training options the
// method's clients use, and how the records are computed and kept.
type Frozen struct {
	Model    *clip.Model
	Tok      *tokenizer.Tokenizer
	Task     *protocol.Task
	Template string
	Depth    int
	Split    bool
	Seed     uint64
	Train    train.Options
	// Views is the augmented views per training image (0: none); Online
	// computes the training records at every step instead of caching them.
	Views  int
	Online bool
	// EvalBatch is the batch of prefix computation and evaluation.
	EvalBatch int
	// Cache, when set, says how the records are stored and filled; nil
	// builds an env without records (a coordinator, which reads no image:
	// its strategy needs the model, the label spaces and the seeds only).
	Cache *Cache
}

// Cache is how a session's frozen records are kept: the RAM budget of
// each store (beyond it records spill to SpillDir), bfloat16 storage,
// NoCache recomputing every record when used, and the progress bar of the
// fill.
type Cache struct {
	Budget   int64
	SpillDir string
	BF16     bool
	NoCache  bool
	Bar      *progress.Bar
}

// NewEnv builds the frozen env f describes: with f.Cache, the training
// and test stores filled with the records of depth f.Depth (split records
// when f.Split); without, an env with the prefixer only.
func NewEnv(ctx context.Context, f Frozen) (*methods.Env, error) {
	S := f.Model.W.Config.Vision.ImageSize
	batch := f.EvalBatch
	if f.Cache == nil {
		px := &prefixcache.Prefixer{Model: f.Model, Start: f.Depth, Transform: preprocess.CLIPTransform(S), Batch: max(batch, 1), Split: f.Split}
		return &methods.Env{Model: f.Model, Tok: f.Tok, Task: f.Task, Start: f.Depth, Template: f.Template, Seed: f.Seed, Train: f.Train,
			Views: f.Views, Online: f.Online, Prefixer: px}, nil
	}
	if batch <= 0 {
		batch = 32
	}
	px := &prefixcache.Prefixer{Model: f.Model, Start: f.Depth, Transform: preprocess.CLIPTransform(S), Batch: batch, Split: f.Split}
	dtype := actcache.Float32
	if f.Cache.BF16 {
		dtype = actcache.BFloat16
	}
	opts := actcache.Options{RecordLen: px.RecordLen(), MemoryBudget: f.Cache.Budget, SpillDir: f.Cache.SpillDir, DType: dtype}
	trainStore, err := actcache.New(opts)
	if err != nil {
		return nil, err
	}
	testStore, err := actcache.New(opts)
	if err != nil {
		trainStore.Close()
		return nil, err
	}
	env := &methods.Env{Model: f.Model, Tok: f.Tok, Task: f.Task, Start: f.Depth, Template: f.Template, Seed: f.Seed,
		Train: f.Train, Views: f.Views, Online: f.Online, Prefixer: px, TrainStore: trainStore, TestStore: testStore,
		Evaluator: &eval.Evaluator{Source: testStore, RecordLen: px.RecordLen(), Batch: batch}}
	if err := env.Fill(ctx, f.Views, f.Cache.NoCache, f.Cache.Bar); err != nil {
		trainStore.Close()
		testStore.Close()
		return nil, err
	}
	return env, nil
}

// CloseEnv releases env's stores of frozen records, the test store before
// the training store (an env without stores: nothing).
func CloseEnv(env *methods.Env) {
	if env.TestStore != nil {
		env.TestStore.Close()
	}
	if env.TrainStore != nil && env.TrainStore != env.TestStore {
		env.TrainStore.Close()
	}
}

// Config is one method's session.
type Config struct {
	// Env is the frozen env the session runs on (NewEnv's; one env serves
	// the methods of a run that share a cache key, and a benchmark builds
	// its own from tensors).
	Env *methods.Env
	// Method and its settings (its configuration section).
	Method   methods.Method
	Settings config.Section
	// Federation wraps the plan's strategy and schedules its rounds.
	Federation Federation
	// DropLast is the method's train.drop_last, resolved (its authors'
	// training loader under auto): whether an epoch skips a partial last
	// batch when the client holds at least one full batch.
	DropLast bool
}

// Session is one method ready to be driven: its env (Config.Env with the
// method's training options, methods.Env.ForMethod), its plan and, for a
// method that trains, the coordinator of its federation (the caller adds
// the proxies, the store and the observers it drives it with).
type Session struct {
	Env         *methods.Env
	Plan        *methods.Plan
	Coordinator *federation.Coordinator
}

// Build builds c's session on a copy of its frozen env that holds the
// method's training options (c.Env is not written): the method's plan with its
// strategy wrapped (Federation.Plan) and, when the method trains, its
// coordinator (Federation.Coordinator).
func Build(c Config) (*Session, error) {
	if c.Env == nil {
		return nil, fmt.Errorf("%s: no frozen env to build the session on", c.Method.Info().Name)
	}
	// the method's own copy of the frozen env, with its training loader:
	// the env the methods of a run share is never written
	opts := c.Env.Train
	opts.DropLast = c.DropLast
	env := c.Env.ForMethod(opts)
	env.Rounds = c.Federation.Rounds
	plan, err := c.Federation.Plan(c.Method, env, c.Settings)
	if err != nil {
		return nil, err
	}
	s := &Session{Env: env, Plan: plan}
	if plan.Strategy != nil {
		s.Coordinator = c.Federation.Coordinator(plan.Strategy)
	}
	return s, nil
}
