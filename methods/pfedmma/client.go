package pfedmma

import (
	"context"
	"fmt"
	"strings"

	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

// client is one pFedMMA site: private down/up projections, the shared
// projections it last received, its own optimizer and random state.
type client struct {
	env     *methods.Env
	task    *protocol.ClientTask
	learner *Learner
	loop    *train.Loop
	txt     map[int][]float32
	labels  []int
	// group evaluates the run's clients together (nil: alone).
	group *evalGroup
}

func newClient(env *methods.Env, task *protocol.ClientTask, init *Adapters, ws *Workspace) (*client, error) {
	a := New(init.Cfg, init.Dv, init.Dt, nil)
	if err := a.Load(init.Params); err != nil {
		return nil, err
	}
	l, err := NewLearner(env.Model, a, ws)
	if err != nil {
		return nil, err
	}
	l.Split = env.Split()
	loop, err := train.NewLoop(env.Train, len(task.Train), env.Seed, uint64(task.ID)+1, fmt.Sprintf("pfedmma client %d", task.ID))
	if err != nil {
		return nil, err
	}
	return &client{env: env, task: task, learner: l, loop: loop}, nil
}

func (c *client) ID() int          { return c.task.ID }
func (c *client) NumExamples() int { return len(c.task.Train) }

// Params implements train.Learner: every adapter parameter is trained.
func (c *client) Params() []optim.Param {
	a := c.learner.Adapters
	var ps []optim.Param
	for _, n := range a.Names() {
		ps = append(ps, optim.Param{Name: n, Value: a.Params[n].Data, Grad: a.Grads[n].Data})
	}
	return ps
}

// Step implements train.Learner on one batch of cached (or online) prefixes.
func (c *client) Step(ctx context.Context, b train.Batch) (float64, int, error) {
	batch := b.Items
	if err := c.env.TrainBatch(c.task, batch, b.RNG, b.Round, b.Epoch); err != nil {
		return 0, 0, err
	}
	c.labels = c.labels[:0]
	for _, k := range batch {
		c.labels = append(c.labels, c.task.Labels[k])
	}
	c.learner.Adapters.ZeroGrads()
	loss, logits, err := c.learner.Step(c.env.TrainBuf, len(batch), c.labels)
	if err != nil {
		return 0, 0, err
	}
	C := len(logits) / len(batch)
	correct := 0
	for k := range batch {
		if eval.Argmax(logits[k*C:(k+1)*C]) == c.labels[k] {
			correct++
		}
	}
	return loss, correct, nil
}

// Fit loads the global shared projections, trains every adapter parameter
// for the configured local epochs and uploads the shared projections.
func (c *client) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	a := c.learner.Adapters
	for name, t := range ins.Params {
		p, ok := a.Params[name]
		if !ok || !IsShared(name) {
			return federation.FitRes{}, fmt.Errorf("client %d: received unexpected tensor %q", c.task.ID, name)
		}
		if !tensor.SameShape(p.Shape, t.Shape) {
			return federation.FitRes{}, fmt.Errorf("client %d: received %q with shape %v, want %v", c.task.ID, name, t.Shape, p.Shape)
		}
		copy(p.Data, t.Data)
	}
	c.learner.Attach()
	prefix, eot, err := c.env.SpacePrompts(c.task.TrainSpace)
	if err != nil {
		return federation.FitRes{}, err
	}
	c.learner.SetClassPrefix(prefix, eot, len(eot))
	bar := c.env.StepBar(c.loop.Batches(), fmt.Sprintf("client %d batch", c.task.ID))
	defer bar.Finish()
	c.loop.Progress = func(n int) { bar.AddItems(1, n) }
	m, err := c.loop.Run(ctx, ins.Round, c)
	if err != nil {
		return federation.FitRes{}, err
	}
	up := tensor.Named{}
	for name, p := range a.Params {
		if IsShared(name) {
			up[name] = p.Clone()
		}
	}
	return federation.FitRes{Params: up, NumExamples: len(c.task.Train), Metrics: m}, nil
}

// Evaluate scores the client's personalised adapters on its evaluation sets.
func (c *client) Evaluate(ctx context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	c.learner.Attach()
	c.txt = map[int][]float32{}
	bar := c.env.StepBar(1, fmt.Sprintf("client %d eval", c.task.ID))
	defer bar.Finish()
	sc := methods.CosineScorer{Model: c.env.Model, Text: c.textFeatures,
		Image: func(prefix []float32, B int) []float32 { return c.learner.ImageFeatures(prefix, B, false) }}
	m, err := c.env.Evaluate(ctx, sc, c.task)
	return federation.EvaluateRes{Metrics: m, NumExamples: len(c.task.Train)}, err
}

// attachedScorer scores with a client's adapters, attaching them for every
// batch (the model's blocks are shared with other clients).
type attachedScorer struct{ c *client }

// Logits implements eval.Scorer.
func (s attachedScorer) Logits(space int, prefix []float32, B int) ([]float32, error) {
	c := s.c
	txt, err := c.textFeatures(space)
	if err != nil {
		return nil, err
	}
	c.learner.Attach()
	sc := methods.CosineScorer{Model: c.env.Model, Text: func(int) ([]float32, error) { return txt, nil },
		Image: func(prefix []float32, B int) []float32 { return c.learner.ImageFeatures(prefix, B, false) }}
	return sc.Logits(space, prefix, B)
}

func (c *client) textFeatures(space int) ([]float32, error) {
	if f, ok := c.txt[space]; ok {
		return f, nil
	}
	p, eot, err := c.env.SpacePrompts(space)
	if err != nil {
		return nil, err
	}
	c.learner.Attach()
	c.learner.SetClassPrefix(p, eot, len(eot))
	f := append([]float32(nil), c.learner.TextFeatures(false)...)
	c.txt[space] = f
	return f, nil
}

// State holds every adapter parameter, the optimizer state and the random
// generator: everything needed to continue bit-identically.
func (c *client) State() (tensor.Named, error) {
	st, err := c.loop.State()
	if err != nil {
		return nil, err
	}
	for name, p := range c.learner.Adapters.Params {
		st["adapter/"+name] = p.Clone()
	}
	return st, nil
}

// LoadState restores a State.
func (c *client) LoadState(st tensor.Named) error {
	params := tensor.Named{}
	for name, t := range st {
		if n, ok := strings.CutPrefix(name, "adapter/"); ok {
			params[n] = t
		}
	}
	if err := c.learner.Adapters.Load(params); err != nil {
		return fmt.Errorf("client %d state: %w", c.task.ID, err)
	}
	return c.loop.LoadState(st)
}
