package methods

import (
	"context"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/progress"
	"github.com/pfedmma/pfedmma/protocol"
)

// Observer is what a runner watches of a method's clients while they
// work. The runner puts it in the context it runs the federation with
// (WithObserver); the clients find it in the context of their Fit and
// Evaluate, so that the Env stays free of per-run hooks.
type Observer struct {
	// RoundBar is the running method's round bar: clients hang the bars
	// of their batches under it (StepBar).
	RoundBar *progress.Bar
	// OnEvaluate, when set, is told of every client evaluation (Env's
	// Evaluate and EvaluateGroup): the client's task and, per evaluation
	// set of c.Evals, the logits it scored [len(Images), C] — the window a
	// test has onto what a site's evaluation computed (predict =
	// evaluation).
	OnEvaluate func(c *protocol.ClientTask, logits [][]float32)
	// OnTrainBatch, when set, is told of every training batch a client
	// loads (its task and the batch's indices into c.Train) — the window a
	// test has onto the batches an epoch steps.
	OnTrainBatch func(c *protocol.ClientTask, batch []int)
}

type observerKey struct{}

// WithObserver returns ctx carrying o.
func WithObserver(ctx context.Context, o *Observer) context.Context {
	return context.WithValue(ctx, observerKey{}, o)
}

// ObserverFrom returns the Observer ctx carries (an empty one when none).
func ObserverFrom(ctx context.Context) *Observer {
	if o, ok := ctx.Value(observerKey{}).(*Observer); ok && o != nil {
		return o
	}
	return &Observer{}
}

// StepBar starts a progress bar for one client's batches inside the
// current round of ctx's Observer (a quiet bar without a round bar).
func StepBar(ctx context.Context, total int, desc string) *progress.Bar {
	if bar := ObserverFrom(ctx).RoundBar; bar != nil {
		return bar.Child(total, desc, "img")
	}
	return progress.New(nil, total, desc, "img")
}

// Observed returns c with o in the context of its Fit and Evaluate: a
// site's client driven by a transport, whose contexts the runner does not
// make.
func Observed(c federation.Client, o *Observer) federation.Client {
	return &observed{Client: c, o: o}
}

type observed struct {
	federation.Client
	o *Observer
}

func (c *observed) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	return c.Client.Fit(WithObserver(ctx, c.o), ins)
}

func (c *observed) Evaluate(ctx context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	return c.Client.Evaluate(WithObserver(ctx, c.o), ins)
}
