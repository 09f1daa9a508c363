package adapt

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/methods/clientbase"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/tensor"
)

// Client is one ADAPT site: every parameter (its own domain's text prompt,
// its EMA copies of the other domains' prompts, the visual prompts, AdaLN),
// the latest received copies the EMA moves toward, its optimizer and random
// state.
type Client struct {
	clientbase.Base
	sh *shared
	// Domain is the client's ADAPT domain index (into Domains(task)).
	Domain int
	// P are the parameters, G their gradients (reference names).
	P, G tensor.Named
	// Recv holds the latest received text prompt of every other domain
	// that has been relayed (the EMA targets).
	Recv tensor.Named
}

// trained reports whether the client's optimizer updates a parameter.
func (c *Client) trained(name string) bool {
	return !Relayed(name) || name == TextName(c.Domain)
}

// Params implements train.Learner: the own text prompt, the visual prompts
// and AdaLN.
func (c *Client) Params() []optim.Param { return clientbase.Params(c.P, c.G, c.trained) }

// emaStep moves every external prompt toward its received copy:
// t ← α·t + (1−α)·t_received.
func (c *Client) emaStep() {
	a := float32(c.sh.ema)
	for name, r := range c.Recv {
		t := c.P[name].Data
		for i, v := range r.Data {
			t[i] = a*t[i] + (1-a)*v
		}
	}
}

// Step implements train.Learner: one EMA update of the external prompts,
// then the loss and gradients of a batch of cached prefixes.
func (c *Client) Step(ctx context.Context, b train.Batch) (float64, int, error) {
	labels, err := c.Batch(b)
	if err != nil {
		return 0, 0, err
	}
	l, err := c.sh.learner(c.Task.TrainSpace)
	if err != nil {
		return 0, 0, err
	}
	c.emaStep()
	loss, _, correct, err := l.Step(c.P, c.G, c.Buf(), labels, c.Domain)
	if err != nil {
		return 0, 0, fmt.Errorf("adapt client %d: %w", c.Task.ID, err)
	}
	return loss, correct, nil
}

// Receive installs what the server sent: the averaged tensors, and the
// relayed text prompts — averaged per domain — as the EMA targets of the
// other domains and, merged with the client's own copy, as its own
// domain's prompt.
func (c *Client) Receive(in tensor.Named) error {
	global, relayed, err := strategy.SplitRelayed(in)
	if err != nil {
		return fmt.Errorf("adapt client %d: %w", c.Task.ID, err)
	}
	if err := c.Install(c.P, global, Averaged); err != nil {
		return err
	}
	by := map[string][]*tensor.Tensor{}
	for _, id := range slices.Sorted(maps.Keys(relayed)) {
		for name, t := range relayed[id] {
			p, ok := c.P[name]
			if !ok || !Relayed(name) || !tensor.SameShape(p.Shape, t.Shape) {
				return fmt.Errorf("adapt client %d: relayed tensor %q from client %d does not fit", c.Task.ID, name, id)
			}
			by[name] = append(by[name], t)
		}
	}
	own := TextName(c.Domain)
	if peers := by[own]; len(peers) > 0 {
		copy(c.P[own].Data, meanOf(append([]*tensor.Tensor{c.P[own]}, peers...)).Data)
	}
	delete(by, own)
	if c.Recv == nil {
		c.Recv = tensor.Named{}
	}
	for name, ts := range by {
		c.Recv[name] = meanOf(ts)
	}
	return nil
}

// Fit installs what the server sent, trains locally and uploads its own
// text prompt, the visual prompts and AdaLN.
func (c *Client) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	if err := c.Receive(ins.Params); err != nil {
		return federation.FitRes{}, err
	}
	m, err := c.Train(ctx, ins.Round, c)
	if err != nil {
		return federation.FitRes{}, err
	}
	return c.Fitted(clientbase.Shared(c.P, c.trained), m), nil
}

// Evaluate scores the client's parameters on its evaluation sets.
func (c *Client) Evaluate(ctx context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	return c.Base.Evaluate(ctx, &Scorer{Learner: c.sh.learner, P: c.P})
}

// Scorer scores cached prefixes with parameters P (eval.Scorer); the text
// features of each label space are computed once.
type Scorer struct {
	Learner func(space int) (*Learner, error)
	P       tensor.Named
	ready   map[int]bool
}

// Logits implements eval.Scorer.
func (s *Scorer) Logits(space int, prefix []float32, B int) ([]float32, error) {
	l, err := s.Learner(space)
	if err != nil {
		return nil, err
	}
	if s.ready == nil {
		s.ready = map[int]bool{}
	}
	// each label space has its own learner, which keeps its text features
	if !s.ready[space] {
		if _, err := l.TextFeatures(s.P); err != nil {
			return nil, err
		}
		s.ready[space] = true
	}
	lg, _, err := l.Logits(s.P, prefix, B)
	return lg, err
}

// State holds the parameters (the EMA copies of the other domains' prompts
// included), the received copies, the optimizer state and the random
// generator.
func (c *Client) State() (tensor.Named, error) {
	return c.SaveState(clientbase.Saved{Prefix: "param/", Tensors: c.P}, clientbase.Saved{Prefix: "recv/", Tensors: c.Recv})
}

// LoadState restores a State.
func (c *Client) LoadState(st tensor.Named) error {
	if err := c.LoadTensors(st, clientbase.Saved{Prefix: "param/", Tensors: c.P}); err != nil {
		return err
	}
	recv := tensor.Named{}
	for k, t := range st {
		name, ok := strings.CutPrefix(k, "recv/")
		if !ok {
			continue
		}
		p, ok := c.P[name]
		if !ok || !Relayed(name) || !tensor.SameShape(t.Shape, p.Shape) {
			return fmt.Errorf("adapt client %d state: %s does not fit", c.Task.ID, k)
		}
		recv[name] = t.Clone()
	}
	c.Recv = recv
	return c.Loop.LoadState(st)
}
