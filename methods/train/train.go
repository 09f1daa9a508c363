// Package train is the local training loop every trained method shares:
// local epochs over a client's examples in a seeded order, mini-batches, the
// learning-rate schedule, the optimizer (reset each round or kept), and a
// check that stops at the first non-finite loss, gradient or parameter.
// The loop trains a Trainable (the client, methods/client): its parameters
// and how one batch turns into a loss and gradients.
package train

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/tensor"
)

// Options are the local-training settings shared by the trained methods.
type Options struct {
	Epochs    int     // local epochs per round
	Batch     int     // batch size
	Optimizer string  // "sgd" or "adamw"
	LR        float64 // base learning rate
	Momentum  float64
	WD        float64
	// Schedule gives the learning rate of each local epoch, indexed by the
	// global epoch round·Epochs + epoch; nil means constant LR.
	Schedule optim.Schedule
	// ResetOptimizer starts every round with a fresh optimizer instead of
	// keeping each client's optimizer state across rounds.
	ResetOptimizer bool
	// InOrder takes the examples in stored order every epoch instead of a
	// seeded shuffle (the reference fixtures' rounds).
	InOrder bool
	// DropLast drops each epoch's partial last batch when the client holds
	// at least one full batch (Dassl's training loaders: drop_last =
	// len(data) >= batch_size).
	DropLast bool
}

// epochItems is how many of n examples an epoch trains on in batches of b.
func (o Options) epochItems(n, b int) int {
	if o.DropLast && n >= b {
		return n / b * b
	}
	return n
}

// NewOptimizer returns a fresh optimizer of the configured kind.
func (o Options) NewOptimizer() (optim.Optimizer, error) {
	switch o.Optimizer {
	case "", "sgd":
		return optim.NewSGD(o.Momentum, o.WD, false), nil
	case "adamw":
		return optim.NewAdamW(o.WD), nil
	}
	return nil, fmt.Errorf("train: unknown optimizer %q (want sgd or adamw)", o.Optimizer)
}

// Rate is the learning rate of local epoch epoch of round.
func (o Options) Rate(round, epoch int) float64 {
	if o.Schedule == nil {
		return o.LR
	}
	return o.Schedule.LR(round*max(o.Epochs, 1) + epoch)
}

// Trainable is one client's trainable model as the loop sees it (the
// client layer's methods/client.Client; a method's model of a label space
// is a methods/client.Learner).
type Trainable interface {
	// Params lists the trainable parameters with their gradient buffers.
	Params() []optim.Param
	// Step zeroes the gradients, runs one mini-batch forward and backward,
	// and returns the mean loss and the number of correctly classified
	// examples.
	Step(ctx context.Context, b Batch) (loss float64, correct int, err error)
}

// Batch is one mini-batch of a client's local training.
type Batch struct {
	// Items are indices into the client's training examples.
	Items        []int
	Round, Epoch int
	// RNG is the client's generator (for picking cached augmented views).
	RNG *rand.Rand
}

// Loop trains one client: it owns the client's optimizer and random state.
type Loop struct {
	Opts Options
	// N is the number of training examples.
	N   int
	Opt optim.Optimizer
	pcg *rand.PCG
	rng *rand.Rand
	// Progress, when set, is told of every finished batch (its size).
	Progress func(items int)
	// Name labels errors ("client 3").
	Name string
}

// NewLoop returns a loop with a fresh optimizer and the generator
// PCG(seed, stream).
func NewLoop(opts Options, n int, seed, stream uint64, name string) (*Loop, error) {
	opt, err := opts.NewOptimizer()
	if err != nil {
		return nil, err
	}
	pcg := rand.NewPCG(seed, stream)
	return &Loop{Opts: opts, N: n, Opt: opt, pcg: pcg, rng: rand.New(pcg), Name: name}, nil
}

// Batches is the number of mini-batches of one round.
func (l *Loop) Batches() int {
	B := max(l.Opts.Batch, 1)
	return max(l.Opts.Epochs, 1) * ((l.Opts.epochItems(l.N, B) + B - 1) / B)
}

// Run trains for the configured local epochs of round and returns the mean
// batch loss ("loss") and the training accuracy in percent ("train_acc").
func (l *Loop) Run(ctx context.Context, round int, lr Trainable) (map[string]float64, error) {
	if l.Opts.ResetOptimizer {
		opt, err := l.Opts.NewOptimizer()
		if err != nil {
			return nil, err
		}
		l.Opt = opt
	}
	B := max(l.Opts.Batch, 1)
	var lossSum float64
	var correct, seen, steps int
	params := lr.Params()
	for epoch := 0; epoch < max(l.Opts.Epochs, 1); epoch++ {
		rate := l.Opts.Rate(round, epoch)
		order := l.order()
		order = order[:l.Opts.epochItems(len(order), B)]
		for s := 0; s < len(order); s += B {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			batch := order[s:min(s+B, len(order))]
			loss, ok, err := lr.Step(ctx, Batch{Items: batch, Round: round, Epoch: epoch, RNG: l.rng})
			if err != nil {
				return nil, err
			}
			if math.IsNaN(loss) || math.IsInf(loss, 0) {
				return nil, fmt.Errorf("%s: round %d, epoch %d, batch %d: loss is %v (lower the learning rate?)", l.Name, round, epoch, steps, loss)
			}
			if name, ok := nonFinite(params, true); !ok {
				return nil, fmt.Errorf("%s: round %d, epoch %d, batch %d: gradient of %s is not finite", l.Name, round, epoch, steps, name)
			}
			if err := l.Opt.Step(rate, params); err != nil {
				return nil, err
			}
			if name, ok := nonFinite(params, false); !ok {
				return nil, fmt.Errorf("%s: round %d, epoch %d, batch %d: parameter %s is not finite after the step (lower the learning rate?)", l.Name, round, epoch, steps, name)
			}
			lossSum += loss
			correct += ok
			seen += len(batch)
			steps++
			if l.Progress != nil {
				l.Progress(len(batch))
			}
		}
	}
	return map[string]float64{"loss": lossSum / float64(max(steps, 1)), "train_acc": 100 * float64(correct) / float64(max(seen, 1))}, nil
}

// order is the example order of one epoch.
func (l *Loop) order() []int {
	if l.Opts.InOrder {
		o := make([]int, l.N)
		for i := range o {
			o[i] = i
		}
		return o
	}
	return l.rng.Perm(l.N)
}

// nonFinite finds a parameter (or its gradient) holding NaN or ±Inf.
func nonFinite(params []optim.Param, grads bool) (string, bool) {
	for _, p := range params {
		x := p.Value
		if grads {
			x = p.Grad
		}
		var s float32
		for _, v := range x {
			s += v * 0 // NaN and ±Inf survive the product, finite values vanish
		}
		if s != s {
			return p.Name, false
		}
	}
	return "", true
}

// State returns the optimizer state under "opt/" and the generator under
// "rng".
func (l *Loop) State() (tensor.Named, error) {
	st := tensor.Named{}
	for name, t := range l.Opt.State() {
		st["opt/"+name] = t
	}
	b, err := l.pcg.MarshalBinary()
	if err != nil {
		return nil, err
	}
	st["rng"] = federation.BytesTensor(b)
	return st, nil
}

// LoadState restores what State returned (other entries are ignored).
func (l *Loop) LoadState(st tensor.Named) error {
	opt := tensor.Named{}
	for name, t := range st {
		if n, ok := strings.CutPrefix(name, "opt/"); ok {
			opt[n] = t
		}
	}
	o, err := l.Opts.NewOptimizer()
	if err != nil {
		return err
	}
	if err := o.LoadState(opt); err != nil {
		return fmt.Errorf("%s optimizer state: %w", l.Name, err)
	}
	l.Opt = o
	rt, ok := st["rng"]
	if !ok {
		return fmt.Errorf("%s state: no rng entry", l.Name)
	}
	b, err := federation.TensorBytes(rt)
	if err != nil {
		return fmt.Errorf("%s state: rng: %w", l.Name, err)
	}
	return l.pcg.UnmarshalBinary(b)
}

// Own returns o with a method's own settings where they are set: optimizer
// ("" keeps o's), lr (> 0 replaces o.LR; a schedule is rescaled by lr/o.LR,
// keeping its shape), weightDecay (> 0 replaces o.WD) and epochs (> 0
// replaces o.Epochs). Zero keeps the run's value, so that a section whose
// own keys are unset trains exactly as the run's optimizer section says.
func (o Options) Own(optimizer string, lr, weightDecay float64, epochs int) Options {
	if optimizer != "" {
		o.Optimizer = optimizer
	}
	if lr > 0 {
		if o.Schedule != nil && o.LR > 0 {
			o.Schedule = scaledSchedule{o.Schedule, lr / o.LR}
		}
		o.LR = lr
	}
	if weightDecay > 0 {
		o.WD = weightDecay
	}
	if epochs > 0 {
		o.Epochs = epochs
	}
	return o
}

// scaledSchedule multiplies a schedule's rates by f.
type scaledSchedule struct {
	s optim.Schedule
	f float64
}

func (s scaledSchedule) LR(t int) float64 { return s.f * s.s.LR(t) }
