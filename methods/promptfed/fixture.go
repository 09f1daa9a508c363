package promptfed

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/fixture"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/tensor"
)

// FixtureRound is the fixture.Rounder round of a method built on promptfed:
// the plain round (fixture.PlainRound: the clients in federation Sites, the
// method's strategy, the Coordinator) with each client's
// "client<i>.batch_losses" (before each step), then
// "client<i>.next.<param>" for every parameter the client holds: where it
// starts the next round, the server's tensors installed by the client's own
// receive step (Spec.Receive, or the shared tensors) into its trained
// parameters. spec builds the method's Spec on the round's Env from its
// settings.
func FixtureRound(ctx context.Context, f *fixture.Fixture, meth fixture.Method, spec func(env *methods.Env, sec config.Section) (*Spec, error)) (tensor.Named, error) {
	var plan *methods.Plan
	var losses *BatchLosses
	out, err := fixture.PlainRound(ctx, f, meth, func(env *methods.Env, sec config.Section) (*methods.Plan, error) {
		sp, err := spec(env, sec)
		if err != nil {
			return nil, err
		}
		losses = RecordLosses(sp)
		plan, err = Build(env, sp)
		return plan, err
	})
	if err != nil {
		return nil, err
	}
	name := meth.Info().Name
	global := tensor.Named{}
	for k, t := range out {
		if g, ok := strings.CutPrefix(k, "global."); ok {
			global[g] = t
		}
	}
	if len(global) == 0 || plan == nil {
		return nil, fmt.Errorf("%s round: the server holds no global tensor", name)
	}
	for i, cl := range plan.Clients {
		c, ok := cl.(*Client)
		if !ok {
			return nil, fmt.Errorf("%s round: client %d is a %T", name, i, cl)
		}
		if c.Spec.Receive != nil {
			err = c.Spec.Receive(c, global.Clone())
		} else {
			err = c.ReceiveShared(global.Clone())
		}
		if err != nil {
			return nil, err
		}
		for p, t := range c.P {
			out[fmt.Sprintf("client%d.next.%s", i, p)] = t.Clone()
		}
	}
	maps.Copy(out, losses.Named())
	return out, nil
}

// BatchLosses records the loss of every training batch of every client
// (before its step) as the production clients compute it: the reference
// fixtures' "client<i>.batch_losses".
type BatchLosses struct {
	last float64
	by   map[int][]float32
}

// RecordLosses makes spec's learners report each batch's loss to the
// returned recorder (spec is changed in place; its own AfterBackward still
// runs). Only for replaying fixture rounds: the wrapped learners hide their
// concrete types.
func RecordLosses(spec *Spec) *BatchLosses {
	r := &BatchLosses{by: map[int][]float32{}}
	newLearner, after := spec.NewLearner, spec.AfterBackward
	spec.NewLearner = func(tokens []int) (Learner, error) {
		l, err := newLearner(tokens)
		if err != nil {
			return nil, err
		}
		return &recording{Learner: l, r: r}, nil
	}
	spec.AfterBackward = func(c *Client, b train.Batch) error {
		r.by[c.Task.ID] = append(r.by[c.Task.ID], float32(r.last))
		if after != nil {
			return after(c, b)
		}
		return nil
	}
	return r
}

// Named returns "client<id>.batch_losses" for every client that trained.
func (r *BatchLosses) Named() tensor.Named {
	out := tensor.Named{}
	for id, v := range r.by {
		out[fmt.Sprintf("client%d.batch_losses", id)] = &tensor.Tensor{Shape: []int{len(v)}, Data: append([]float32(nil), v...)}
	}
	return out
}

// recording is a learner that keeps the loss of its last Step.
type recording struct {
	Learner
	r *BatchLosses
}

func (l *recording) Step(img []float32, labels []int) (float64, map[string]float64, []float32, error) {
	loss, terms, logits, err := l.Learner.Step(img, labels)
	l.r.last = loss
	return loss, terms, logits, err
}
