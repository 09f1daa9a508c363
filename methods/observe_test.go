package methods

import (
	"context"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/progress"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestStepBar: a client's batch bar hangs under the round bar of its
// context's Observer, and is a quiet bar of its own without one.
func TestStepBar(t *testing.T) {
	round := progress.New(nil, 2, "m round", "round", progress.WithMode(progress.Quiet))
	ctx := WithObserver(context.Background(), &Observer{RoundBar: round})
	b := StepBar(ctx, 3, "client 4 batch")
	b.AddItems(1, 8)
	if s := round.String(); !strings.Contains(s, "client 4 batch 1/3") {
		t.Errorf("round bar %q does not show the client's batches", s)
	}
	alone := StepBar(context.Background(), 3, "client 5 batch")
	alone.AddItems(1, 8)
	if s := round.String(); strings.Contains(s, "client 5") {
		t.Errorf("a bar without an observer joined the round bar: %q", s)
	}
	if ObserverFrom(context.Background()) == nil {
		t.Error("ObserverFrom without one is nil")
	}
}

// ctxClient records the observer of its calls' contexts.
type ctxClient struct{ fit, eval *Observer }

func (c *ctxClient) ID() int          { return 7 }
func (c *ctxClient) NumExamples() int { return 1 }
func (c *ctxClient) Fit(ctx context.Context, _ federation.FitIns) (federation.FitRes, error) {
	c.fit = ObserverFrom(ctx)
	return federation.FitRes{}, nil
}
func (c *ctxClient) Evaluate(ctx context.Context, _ federation.EvaluateIns) (federation.EvaluateRes, error) {
	c.eval = ObserverFrom(ctx)
	return federation.EvaluateRes{}, nil
}
func (c *ctxClient) State() (tensor.Named, error) { return nil, nil }
func (c *ctxClient) LoadState(tensor.Named) error { return nil }

// TestObserved: a wrapped client's Fit and Evaluate see the observer, and
// the wrapper keeps the client's identity.
func TestObserved(t *testing.T) {
	inner := &ctxClient{}
	o := &Observer{OnEvaluate: func(*protocol.ClientTask, [][]float32) {}}
	c := Observed(inner, o)
	if _, err := c.Fit(context.Background(), federation.FitIns{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Evaluate(context.Background(), federation.EvaluateIns{}); err != nil {
		t.Fatal(err)
	}
	if inner.fit != o || inner.eval != o || c.ID() != 7 {
		t.Errorf("Fit saw %p, Evaluate %p, want %p; ID %d", inner.fit, inner.eval, o, c.ID())
	}
}
