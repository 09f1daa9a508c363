package experiment

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/mma"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/tensor"
)

// TrainOptions are the local-training settings shared by the trained methods.
type TrainOptions struct {
	Epochs    int     // local epochs per round
	Batch     int     // batch size
	Optimizer string  // "sgd" or "adamw"
	LR        float64 // base learning rate
	Momentum  float64
	WD        float64
	// Schedule gives the learning rate of each local epoch, indexed by the
	// global epoch round·Epochs + epoch (constant, or cosine with warmup
	// over rounds × local epochs); nil means constant LR.
	Schedule optim.Schedule
	// ResetOptimizer starts every round with a fresh optimizer instead of
	// keeping each client's optimizer state across rounds.
	ResetOptimizer bool
	// Views is the number of cached augmented views per training image
	// (0: the exact center crop).
	Views int
}

func (o TrainOptions) newOptimizer() (optim.Optimizer, error) {
	switch o.Optimizer {
	case "", "sgd":
		return optim.NewSGD(o.Momentum, o.WD, false), nil
	case "adamw":
		return optim.NewAdamW(o.WD), nil
	}
	return nil, fmt.Errorf("experiment: unknown optimizer %q (want sgd or adamw)", o.Optimizer)
}

func (o TrainOptions) lr(round, epoch int) float64 {
	if o.Schedule == nil {
		return o.LR
	}
	return o.Schedule.LR(round*max(o.Epochs, 1) + epoch)
}

// mmaClient is one pFedMMA site: private down/up projections, the shared
// projections it last received, its own optimizer and random state.
type mmaClient struct {
	env     *Env
	task    *ClientTask
	opts    TrainOptions
	learner *mma.Learner
	opt     optim.Optimizer
	pcg     *rand.PCG
	rng     *rand.Rand
	txt     map[int][]float32
}

func newMMAClient(env *Env, task *ClientTask, opts TrainOptions, init *mma.Adapters, seed uint64) (*mmaClient, error) {
	a := mma.New(init.Cfg, init.Dv, init.Dt, nil)
	if err := a.Load(init.Params); err != nil {
		return nil, err
	}
	l, err := mma.NewLearner(env.Model, a, env.adapterWS)
	if err != nil {
		return nil, err
	}
	opt, err := opts.newOptimizer()
	if err != nil {
		return nil, err
	}
	pcg := rand.NewPCG(seed, uint64(task.ID)+1)
	return &mmaClient{env: env, task: task, opts: opts, learner: l, opt: opt, pcg: pcg, rng: rand.New(pcg)}, nil
}

func (c *mmaClient) ID() int          { return c.task.ID }
func (c *mmaClient) NumExamples() int { return len(c.task.Train) }

func (c *mmaClient) params() []optim.Param {
	a := c.learner.Adapters
	var ps []optim.Param
	for _, n := range a.Names() {
		ps = append(ps, optim.Param{Name: n, Value: a.Params[n].Data, Grad: a.Grads[n].Data})
	}
	return ps
}

// Fit loads the global shared projections, trains every adapter parameter
// for the configured local epochs and uploads the shared projections.
func (c *mmaClient) Fit(ctx context.Context, round int, in tensor.Named) (tensor.Named, map[string]float64, error) {
	a := c.learner.Adapters
	for name, t := range in {
		p, ok := a.Params[name]
		if !ok || !mma.IsShared(name) {
			return nil, nil, fmt.Errorf("client %d: received unexpected tensor %q", c.task.ID, name)
		}
		if !tensor.SameShape(p.Shape, t.Shape) {
			return nil, nil, fmt.Errorf("client %d: received %q with shape %v, want %v", c.task.ID, name, t.Shape, p.Shape)
		}
		copy(p.Data, t.Data)
	}
	if c.opts.ResetOptimizer {
		opt, err := c.opts.newOptimizer()
		if err != nil {
			return nil, nil, err
		}
		c.opt = opt
	}
	c.learner.Attach()
	prefix, eot, err := c.env.SpacePrompts(c.task.TrainSpace)
	if err != nil {
		return nil, nil, err
	}
	c.learner.SetClassPrefix(prefix, eot, len(eot))
	n := c.env.Prefixer.RecordLen()
	B := max(c.opts.Batch, 1)
	var lossSum float64
	var correct, seen, steps int
	recs := make([]int, 0, B)
	labels := make([]int, 0, B)
	epochs := max(c.opts.Epochs, 1)
	bar := c.env.stepBar(epochs*((len(c.task.Train)+B-1)/B), fmt.Sprintf("client %d batch", c.task.ID))
	defer bar.Finish()
	for epoch := 0; epoch < epochs; epoch++ {
		lr := c.opts.lr(round, epoch)
		order := c.rng.Perm(len(c.task.Train))
		for s := 0; s < len(order); s += B {
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
			hi := min(s+B, len(order))
			bn := hi - s
			labels = labels[:0]
			c.env.trainBuf = nn.Grow(c.env.trainBuf, bn*n)
			if c.env.Online {
				if err := c.onlinePrefixes(order[s:hi], round, epoch); err != nil {
					return nil, nil, err
				}
			} else {
				recs = recs[:0]
				for _, k := range order[s:hi] {
					views := c.env.TrainRecs[c.task.Train[k]]
					v := 0
					if len(views) > 1 {
						v = c.rng.IntN(len(views))
					}
					recs = append(recs, views[v])
				}
				if err := c.env.TrainStore.GetBatch(recs, c.env.trainBuf); err != nil {
					return nil, nil, err
				}
			}
			for _, k := range order[s:hi] {
				labels = append(labels, c.task.Labels[k])
			}
			a.ZeroGrads()
			loss, logits, err := c.learner.Step(c.env.trainBuf, bn, labels)
			if err != nil {
				return nil, nil, err
			}
			if err := c.opt.Step(lr, c.params()); err != nil {
				return nil, nil, err
			}
			C := len(eot)
			for k := 0; k < bn; k++ {
				if argmax(logits[k*C:(k+1)*C]) == labels[k] {
					correct++
				}
			}
			lossSum += loss
			seen += bn
			steps++
			bar.AddItems(1, bn)
		}
	}
	up := tensor.Named{}
	for name, p := range a.Params {
		if mma.IsShared(name) {
			up[name] = p.Clone()
		}
	}
	return up, map[string]float64{"loss": lossSum / float64(max(steps, 1)), "train_acc": 100 * float64(correct) / float64(max(seen, 1))}, nil
}

// onlinePrefixes recomputes the prefixes of a batch from freshly augmented
// pixels (the reference's per-epoch augmentation).
func (c *mmaClient) onlinePrefixes(batch []int, round, epoch int) error {
	p := c.env.Prefixer
	S := c.env.Model.W.Config.Vision.ImageSize
	per := 3 * S * S
	c.env.trainPx = nn.Grow(c.env.trainPx, len(batch)*per)
	errs := make([]error, len(batch))
	nn.ParallelFor(len(batch), 1, func(lo, hi int) {
		for k := lo; k < hi; k++ {
			item := c.task.Train[batch[k]]
			v := view{item: item, index: round*1000 + epoch, augment: true}
			errs[k] = p.pixels(c.env.Task.Train, v, c.env.Seed, c.env.trainPx[k*per:(k+1)*per])
		}
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	c.env.trainBuf = mma.ImagePrefix(c.env.Model, c.env.Start, c.env.trainPx, len(batch), c.env.trainBuf)
	return nil
}

// Evaluate scores the client's personalised adapters on its evaluation sets.
func (c *mmaClient) Evaluate(ctx context.Context, round int) (map[string]float64, error) {
	c.learner.Attach()
	c.txt = map[int][]float32{}
	bar := c.env.stepBar(1, fmt.Sprintf("client %d eval", c.task.ID))
	defer bar.Finish()
	return c.env.evaluate(ctx, c, c.task.Evals)
}

func (c *mmaClient) textFeatures(space int) ([]float32, error) {
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

func (c *mmaClient) imageFeatures(prefix []float32, B int) []float32 {
	return c.learner.ImageFeatures(prefix, B, false)
}

// State holds every adapter parameter, the optimizer state and the random
// generator: everything needed to continue bit-identically.
func (c *mmaClient) State() (tensor.Named, error) {
	st := tensor.Named{}
	for name, p := range c.learner.Adapters.Params {
		st["adapter/"+name] = p.Clone()
	}
	for name, t := range c.opt.State() {
		st["opt/"+name] = t
	}
	b, err := c.pcg.MarshalBinary()
	if err != nil {
		return nil, err
	}
	st["rng"] = federation.BytesTensor(b)
	return st, nil
}

// LoadState restores a State.
func (c *mmaClient) LoadState(st tensor.Named) error {
	params := tensor.Named{}
	opt := tensor.Named{}
	for name, t := range st {
		switch {
		case strings.HasPrefix(name, "adapter/"):
			params[strings.TrimPrefix(name, "adapter/")] = t
		case strings.HasPrefix(name, "opt/"):
			opt[strings.TrimPrefix(name, "opt/")] = t
		}
	}
	if err := c.learner.Adapters.Load(params); err != nil {
		return fmt.Errorf("client %d state: %w", c.task.ID, err)
	}
	o, err := c.opts.newOptimizer()
	if err != nil {
		return err
	}
	if err := o.LoadState(opt); err != nil {
		return fmt.Errorf("client %d optimizer state: %w", c.task.ID, err)
	}
	c.opt = o
	rt, ok := st["rng"]
	if !ok {
		return fmt.Errorf("client %d state: no rng entry", c.task.ID)
	}
	b, err := federation.TensorBytes(rt)
	if err != nil {
		return err
	}
	return c.pcg.UnmarshalBinary(b)
}
