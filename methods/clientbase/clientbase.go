// Package clientbase holds what the site clients of the methods share: the
// client's identity, loading a training batch, the local training run with
// its progress bar, installing received tensors, and saving and restoring
// parameters in the client's state. A method's client embeds Base and keeps
// only what is its own (its model, its step, its scorer).
package clientbase

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

// Base is the part of a site client every method repeats. Its methods ID
// and NumExamples implement federation.Client's identity.
type Base struct {
	// Method is the method's registry name, used in errors.
	Method string
	// Env is the run's environment (model, cached features, evaluation).
	Env *methods.Env
	// Task is the site's share of the data.
	Task *protocol.ClientTask
	// Loop is the site's local training loop (optimizer and generator).
	Loop   *train.Loop
	labels []int
	// ws is the site's batch buffers while it trains, from pool (nil: a
	// fresh one).
	ws   *methods.Workspace
	pool *methods.Workspaces
}

// ID implements federation.Client.
func (b *Base) ID() int { return b.Task.ID }

// NumExamples implements federation.Client.
func (b *Base) NumExamples() int { return len(b.Task.Train) }

// Batch loads the cached features of batch bt into the client's batch
// buffer (Buf) and returns its labels (owned by b, valid until the next
// Batch).
func (b *Base) Batch(bt train.Batch) ([]int, error) {
	if b.ws == nil {
		b.ws = b.pool.Get()
	}
	if err := b.Env.LoadBatch(b.ws, b.Task, bt.Items, bt.RNG, bt.Round, bt.Epoch); err != nil {
		return nil, err
	}
	b.labels = b.labels[:0]
	for _, k := range bt.Items {
		b.labels = append(b.labels, b.Task.Labels[k])
	}
	return b.labels, nil
}

// Buf is the records of the last Batch.
func (b *Base) Buf() []float32 {
	if b.ws == nil {
		return nil
	}
	return b.ws.Buf
}

// Train runs round's local training of l with a progress bar and returns
// the loop's metrics, holding a batch workspace for its length.
func (b *Base) Train(ctx context.Context, round int, l train.Learner) (map[string]float64, error) {
	b.ws = b.pool.Get()
	defer func() { b.pool.Put(b.ws); b.ws = nil }()
	bar := methods.StepBar(ctx, b.Loop.Batches(), fmt.Sprintf("client %d batch", b.Task.ID))
	defer bar.Finish()
	b.Loop.Progress = func(n int) { bar.AddItems(1, n) }
	return b.Loop.Run(ctx, round, l)
}

// Evaluate scores s on the site's evaluation sets.
func (b *Base) Evaluate(ctx context.Context, s eval.Scorer) (federation.EvaluateRes, error) {
	m, err := b.Env.Evaluate(ctx, s, b.Task)
	return federation.EvaluateRes{Metrics: m, NumExamples: len(b.Task.Train)}, err
}

// Install copies the received tensors in into the client's tensors p. A
// name p lacks or accepts rejects (nil accepts every name of p), or a shape
// that differs, is an error naming the tensor.
func (b *Base) Install(p, in tensor.Named, accepts func(name string) bool) error {
	for name, t := range in {
		dst, ok := p[name]
		if !ok || (accepts != nil && !accepts(name)) {
			return fmt.Errorf("%s client %d: received unexpected tensor %q", b.Method, b.Task.ID, name)
		}
		if !tensor.SameShape(dst.Shape, t.Shape) {
			return fmt.Errorf("%s client %d: received %q with shape %v, want %v", b.Method, b.Task.ID, name, t.Shape, dst.Shape)
		}
		copy(dst.Data, t.Data)
	}
	return nil
}

// Fitted is the answer to a Fit: the uploaded tensors up, the site's number
// of training examples and the loop's metrics m.
func (b *Base) Fitted(up tensor.Named, m map[string]float64) federation.FitRes {
	return federation.FitRes{Params: up, NumExamples: len(b.Task.Train), Metrics: m}
}

// Saved is a set of tensors a client saves in its state, each under Prefix
// followed by its name ("param/" + name).
type Saved struct {
	Prefix  string
	Tensors tensor.Named
}

// SaveState returns the loop's state (optimizer and generator) with copies
// of the tensors of sets.
func (b *Base) SaveState(sets ...Saved) (tensor.Named, error) {
	st, err := b.Loop.State()
	if err != nil {
		return nil, err
	}
	for _, s := range sets {
		for name, t := range s.Tensors {
			st[s.Prefix+name] = t.Clone()
		}
	}
	return st, nil
}

// LoadTensors copies every tensor of each set from state st; a missing
// tensor or one of another shape is an error naming it.
func (b *Base) LoadTensors(st tensor.Named, sets ...Saved) error {
	for _, s := range sets {
		for name, p := range s.Tensors {
			t, ok := st[s.Prefix+name]
			if !ok || !tensor.SameShape(t.Shape, p.Shape) {
				return fmt.Errorf("%s client %d state: no %s%s of shape %v", b.Method, b.Task.ID, s.Prefix, name, p.Shape)
			}
			copy(p.Data, t.Data)
		}
	}
	return nil
}

// RestoreState restores a SaveState of the same sets: their tensors, then
// the loop's state.
func (b *Base) RestoreState(st tensor.Named, sets ...Saved) error {
	if err := b.LoadTensors(st, sets...); err != nil {
		return err
	}
	return b.Loop.LoadState(st)
}

// Params pairs the tensors of p that keep accepts (nil: all) with their
// gradients in g, in name order (train.Learner's Params).
func Params(p, g tensor.Named, keep func(name string) bool) []optim.Param {
	var ps []optim.Param
	for _, name := range slices.Sorted(maps.Keys(p)) {
		if keep == nil || keep(name) {
			ps = append(ps, optim.Param{Name: name, Value: p[name].Data, Grad: g[name].Data})
		}
	}
	return ps
}

// Shared returns copies of the tensors of p that shared accepts (the
// tensors a site uploads).
func Shared(p tensor.Named, shared func(name string) bool) tensor.Named {
	up := tensor.Named{}
	for name, t := range p {
		if shared(name) {
			up[name] = t.Clone()
		}
	}
	return up
}

// Bases returns the Base of every client of env's task in order, each with
// its own local training loop of opts (random stream: the client's ID + 1),
// sharing batch workspaces.
func Bases(method string, env *methods.Env, opts train.Options) ([]Base, error) {
	var out []Base
	ws := &methods.Workspaces{}
	for i := range env.Task.Clients {
		t := &env.Task.Clients[i]
		loop, err := train.NewLoop(opts, len(t.Train), env.Seed, uint64(t.ID)+1, fmt.Sprintf("%s client %d", method, t.ID))
		if err != nil {
			return nil, err
		}
		out = append(out, Base{Method: method, Env: env, Task: t, Loop: loop, pool: ws})
	}
	return out, nil
}

// Whole is a Base whose client trains one parameter set P: Fit installs
// the server's tensors into P, trains and uploads those of P that Shared
// accepts (nil: all of them); State holds P (as "param/<name>"), the
// optimizer and the generator.
type Whole struct {
	Base
	// P is the client's parameters (reference names).
	P tensor.Named
	// Shared picks the tensors the server averages (nil: all).
	Shared func(name string) bool
}

// FitWith answers a Fit: it installs ins's tensors, trains l (the client)
// locally and uploads the shared tensors.
func (w *Whole) FitWith(ctx context.Context, ins federation.FitIns, l train.Learner) (federation.FitRes, error) {
	if err := w.Install(w.P, ins.Params, w.Shared); err != nil {
		return federation.FitRes{}, err
	}
	m, err := w.Train(ctx, ins.Round, l)
	if err != nil {
		return federation.FitRes{}, err
	}
	if w.Shared == nil {
		return w.Fitted(w.P.Clone(), m), nil
	}
	return w.Fitted(Shared(w.P, w.Shared), m), nil
}

// EvaluateWith installs the tensors the server sent for the evaluation
// (the round's new global, when it sends one; the site keeps them) and
// scores s on the site's evaluation sets.
func (w *Whole) EvaluateWith(ctx context.Context, ins federation.EvaluateIns, s eval.Scorer) (federation.EvaluateRes, error) {
	if err := w.Install(w.P, ins.Params, w.Shared); err != nil {
		return federation.EvaluateRes{}, err
	}
	return w.Evaluate(ctx, s)
}

// State implements federation.Client: P, the optimizer and the generator.
func (w *Whole) State() (tensor.Named, error) {
	return w.SaveState(Saved{Prefix: "param/", Tensors: w.P})
}

// LoadState implements federation.Client.
func (w *Whole) LoadState(st tensor.Named) error {
	return w.RestoreState(st, Saved{Prefix: "param/", Tensors: w.P})
}
