package client

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

// Client is one site: its parameters P (reference names), its training
// loop (optimizer and random state), its batch buffers while it trains,
// and its method's own part Site (Spec.Site).
type Client struct {
	Env    *methods.Env
	Task   *protocol.ClientTask
	Spaces *Spaces
	Spec   *Spec
	P      tensor.Named
	// Site is the method's own part of the client (Spec.Site; nil without).
	Site any
	loop *train.Loop
	l    Learner
	// ws is the client's batch buffers while it trains, from pool.
	ws     *methods.Workspace
	pool   *methods.Workspaces
	labels []int
	// onLoss, when set, is told of the loss of every training batch
	// (fixture rounds record them).
	onLoss func(loss float64)
}

func newClient(env *methods.Env, t *protocol.ClientTask, sp *Spaces, spec *Spec, p tensor.Named, loop *train.Loop, ws *methods.Workspaces) (*Client, error) {
	c := &Client{Env: env, Task: t, Spaces: sp, Spec: spec, P: p, loop: loop, pool: ws}
	if spec.Site == nil {
		return c, nil
	}
	site, err := spec.Site(c)
	if err != nil {
		return nil, fmt.Errorf("%s client %d: %w", spec.Name, t.ID, err)
	}
	c.Site = site
	return c, nil
}

// ID implements federation.Client.
func (c *Client) ID() int { return c.Task.ID }

// NumExamples implements federation.Client.
func (c *Client) NumExamples() int { return len(c.Task.Train) }

// TrainOptions are the local-training settings the client trains with.
func (c *Client) TrainOptions() train.Options { return c.loop.Opts }

// Learner returns the learner of the client's training space.
func (c *Client) Learner() (Learner, error) { return c.learner(c.Task.TrainSpace) }

// learner returns the learner of a label space: the Owner site's, or the
// one the method's clients share.
func (c *Client) learner(space int) (Learner, error) {
	if o, ok := c.Site.(Owner); ok {
		return o.Learner(space)
	}
	return c.Spaces.Get(space)
}

// Loop is the client's local training loop (its optimizer and random
// generator).
func (c *Client) Loop() *train.Loop { return c.loop }

// EvalGroup implements federation.GroupEvaluator: a Grouper site's group,
// or nil (the client is evaluated alone).
func (c *Client) EvalGroup() federation.GroupEval {
	if g, ok := c.Site.(Grouper); ok {
		return g.EvalGroup()
	}
	return nil
}

// Params implements train.Trainable: the client's tensors (those a Trainer
// site keeps) with the learner's gradient buffers, in name order.
func (c *Client) Params() []optim.Param {
	if err := c.ready(); err != nil {
		return nil
	}
	g := c.l.Grads()
	tr, _ := c.Site.(Trainer)
	var ps []optim.Param
	for _, name := range slices.Sorted(maps.Keys(c.P)) {
		if tr != nil && !tr.Trained(name) {
			continue
		}
		ps = append(ps, optim.Param{Name: name, Value: c.P[name].Data, Grad: g[name].Data})
	}
	return ps
}

// ready picks the learner of the client's training space.
func (c *Client) ready() error {
	if c.l != nil {
		return nil
	}
	l, err := c.Learner()
	c.l = l
	return err
}

// Load copies the client's parameters into learner l.
func (c *Client) Load(l Learner) error {
	lp := l.Params()
	for name, t := range c.P {
		dst, ok := lp[name]
		if !ok || len(dst.Data) != len(t.Data) {
			return fmt.Errorf("%s client %d: learner has no %q of %d values", c.Spec.Name, c.Task.ID, name, len(t.Data))
		}
		if len(t.Data) > 0 && &dst.Data[0] == &t.Data[0] {
			continue // an Owner's learner holding P itself
		}
		copy(dst.Data, t.Data)
	}
	return nil
}

// Step implements train.Trainable on one batch of the client's records.
func (c *Client) Step(ctx context.Context, b train.Batch) (float64, int, error) {
	if err := c.ready(); err != nil {
		return 0, 0, err
	}
	if c.ws == nil {
		c.ws = c.pool.Get()
	}
	if f := methods.ObserverFrom(ctx).OnTrainBatch; f != nil {
		f(c.Task, b.Items)
	}
	if err := c.Env.LoadBatch(c.ws, c.Task, b.Items, b.RNG, b.Round, b.Epoch); err != nil {
		return 0, 0, err
	}
	c.labels = c.labels[:0]
	for _, k := range b.Items {
		c.labels = append(c.labels, c.Task.Labels[k])
	}
	if err := c.Load(c.l); err != nil {
		return 0, 0, err
	}
	if h, ok := c.Site.(BeforeStepper); ok {
		if err := h.BeforeStep(b); err != nil {
			return 0, 0, err
		}
	}
	loss, _, logits, err := c.l.Step(c.ws.Buf, c.labels)
	if err != nil {
		return 0, 0, err
	}
	if c.onLoss != nil {
		c.onLoss(loss)
	}
	if h, ok := c.Site.(AfterBackwarder); ok {
		if err := h.AfterBackward(b); err != nil {
			return 0, 0, err
		}
	}
	return loss, correct(logits, c.labels), nil
}

// correct counts the rows of logits [B, C] whose largest entry is the
// row's label.
func correct(logits []float32, labels []int) int {
	C := len(logits) / len(labels)
	n := 0
	for k, y := range labels {
		if eval.Argmax(logits[k*C:(k+1)*C]) == y {
			n++
		}
	}
	return n
}

// Fit installs what the server sent, trains locally and uploads the shared
// tensors (or the Uploader site's), with the loop's metrics and a Reporter
// site's.
func (c *Client) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	rep, _ := c.Site.(Reporter)
	if rep != nil {
		rep.StartFit()
	}
	if err := c.install(ins.Params); err != nil {
		return federation.FitRes{}, err
	}
	m, err := c.train(ctx, ins.Round)
	if err != nil {
		return federation.FitRes{}, err
	}
	var up tensor.Named
	if u, ok := c.Site.(Uploader); ok {
		up = u.Upload()
	} else {
		up = c.SharedTensors()
	}
	if rep != nil {
		if m == nil {
			m = map[string]float64{}
		}
		if err := rep.Report(ins.Round, m); err != nil {
			return federation.FitRes{}, err
		}
	}
	return federation.FitRes{Params: up, NumExamples: len(c.Task.Train), Metrics: m}, nil
}

// train runs round's local training with a progress bar, holding a batch
// workspace from the plan's pool for its length.
func (c *Client) train(ctx context.Context, round int) (map[string]float64, error) {
	c.ws = c.pool.Get()
	defer func() { c.pool.Put(c.ws); c.ws = nil }()
	bar := methods.StepBar(ctx, c.loop.Batches(), fmt.Sprintf("client %d batch", c.Task.ID))
	defer bar.Finish()
	c.loop.Progress = func(n int) { bar.AddItems(1, n) }
	return c.loop.Run(ctx, round, c)
}

// SharedTensors returns copies of the client's shared tensors.
func (c *Client) SharedTensors() tensor.Named {
	up := tensor.Named{}
	for name, t := range c.P {
		if c.Spec.Shared(name) {
			up[name] = t.Clone()
		}
	}
	return up
}

// install puts the server's tensors into the client's parameters (the
// Receiver site's Receive, or ReceiveShared).
func (c *Client) install(in tensor.Named) error {
	l, err := c.Learner()
	if err != nil {
		return err
	}
	c.l = l
	if r, ok := c.Site.(Receiver); ok {
		return r.Receive(in)
	}
	return c.ReceiveShared(in)
}

// ReceiveShared copies the received shared tensors into the client's
// parameters; anything else is an error naming the tensor.
func (c *Client) ReceiveShared(in tensor.Named) error {
	for name, t := range in {
		p, ok := c.P[name]
		if !ok || !c.Spec.Shared(name) {
			return fmt.Errorf("%s client %d: received unexpected tensor %q", c.Spec.Name, c.Task.ID, name)
		}
		if !tensor.SameShape(p.Shape, t.Shape) {
			return fmt.Errorf("%s client %d: received %q with shape %v, want %v", c.Spec.Name, c.Task.ID, name, t.Shape, p.Shape)
		}
		copy(p.Data, t.Data)
	}
	return nil
}

// keep is what the site keeps for `pfedmma predict`: P and a Keeper's
// tensors.
func (c *Client) keep() (tensor.Named, error) {
	out := c.P.Clone()
	k, ok := c.Site.(Keeper)
	if !ok {
		return out, nil
	}
	extra, err := k.Kept()
	if err != nil {
		return nil, err
	}
	for name, v := range extra {
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%s client %d: kept tensor %q is also a parameter", c.Spec.Name, c.Task.ID, name)
		}
		out[name] = v
	}
	return out, nil
}
