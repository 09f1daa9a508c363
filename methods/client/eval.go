package client

import (
	"context"
	"fmt"
	"maps"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/tensor"
)

// Evaluate installs what the strategy sent for the evaluation (the round's
// new global part, as Fit installs it; nothing when it sends nothing) and
// scores the client's parameters on its evaluation sets.
func (c *Client) Evaluate(ctx context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	if len(ins.Params) > 0 {
		if err := c.install(ins.Params); err != nil {
			return federation.EvaluateRes{}, err
		}
	}
	m, err := c.Env.Evaluate(ctx, c.scorer(), c.Task)
	return federation.EvaluateRes{Metrics: m, NumExamples: len(c.Task.Train)}, err
}

func (c *Client) scorer() *scorer { return &scorer{c: c, ready: map[int]bool{}} }

// scorer prepares each label space's learner once per evaluation (the
// client's parameters loaded, text features computed).
type scorer struct {
	c     *Client
	ready map[int]bool
}

func (s *scorer) Logits(space int, img []float32, B int) ([]float32, error) {
	l, err := s.c.learner(space)
	if err != nil {
		return nil, err
	}
	if !s.ready[space] {
		if err := s.c.Load(l); err != nil {
			return nil, err
		}
		if p, ok := s.c.Site.(Preparer); ok {
			err = p.Prepare(l)
		} else {
			err = l.Prepare()
		}
		if err != nil {
			return nil, err
		}
		s.ready[space] = true
	}
	return l.Logits(img, B)
}

// statePrefix is the prefix of the parameters in the client's State.
func (c *Client) statePrefix() string {
	if c.Spec.StatePrefix == "" {
		return "param/"
	}
	return c.Spec.StatePrefix
}

// State holds the parameters (as "param/<name>", or Spec.StatePrefix), the optimizer state, the
// random generator and an ExtraState site's state.
func (c *Client) State() (tensor.Named, error) {
	st, err := c.loop.State()
	if err != nil {
		return nil, err
	}
	for name, t := range c.P {
		st[c.statePrefix()+name] = t.Clone()
	}
	if x, ok := c.Site.(ExtraState); ok {
		extra, err := x.SaveExtra()
		if err != nil {
			return nil, err
		}
		maps.Copy(st, extra)
	}
	return st, nil
}

// LoadState restores a State.
func (c *Client) LoadState(st tensor.Named) error {
	for name, p := range c.P {
		t, ok := st[c.statePrefix()+name]
		if !ok || !tensor.SameShape(t.Shape, p.Shape) {
			return fmt.Errorf("%s client %d state: no %s%s of shape %v", c.Spec.Name, c.Task.ID, c.statePrefix(), name, p.Shape)
		}
		copy(p.Data, t.Data)
	}
	if x, ok := c.Site.(ExtraState); ok {
		if err := x.LoadExtra(st); err != nil {
			return err
		}
	}
	return c.loop.LoadState(st)
}
