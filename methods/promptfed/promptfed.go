// Package promptfed runs the learnable-prompt methods (PromptFL, FedPGP,
// FedOTP, pFedMoAP) as federated clients: the image encoder is frozen whole
// (image features, or every token's features, are cached once per image),
// one per-label-space Learner is shared by all the clients of a method
// (they train one at a time), and each client keeps its own parameters,
// optimizer and random state and loads them into the learner before using
// it. A method supplies a Spec: how to build a learner for a label space,
// which of its tensors the server receives, and how it scores.
package promptfed

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

// Learner is a prompt method's learner for one label space.
type Learner interface {
	// Params and Grads are the live parameters and the gradients of the
	// last Step, by reference name.
	Params() tensor.Named
	Grads() tensor.Named
	// Step computes the loss of a batch of cached image records and
	// overwrites Grads; it returns the loss, its terms and the logits.
	Step(img []float32, labels []int) (float64, map[string]float64, []float32, error)
	// Prepare computes what scoring needs for the current parameters (the
	// class text features); Logits then scores B cached image records
	// against the space's classes.
	Prepare() error
	Logits(img []float32, B int) ([]float32, error)
}

// Spec is one prompt method.
type Spec struct {
	Name string
	// Placeholder is the number of "X" words before each class name in the
	// class prompts (n_ctx).
	Placeholder int
	// Words, when set, replaces the Placeholder's "X" words before each
	// class name (MaPLe's CTX_INIT "a photo of a").
	Words string
	// Prefixes, when set, makes the learners take the cached input of the
	// image encoder's first block (ln_pre output, depth 0 or 1) instead of
	// frozen image features: methods that prompt the image encoder (MaPLe).
	Prefixes bool
	// Embeddings, when set, makes the learners take methods.Embeddings
	// records (ln_pre's input and frozen features of the image and its
	// mirror): FedMVP.
	Embeddings bool
	// NewLearner builds the learner of a label space from its class
	// prompts [C, ctx].
	NewLearner func(tokens []int) (Learner, error)
	// NewSpaceLearner, when set, replaces NewLearner for methods that need
	// more of the label space than its class prompts (KgCoOp: the run's
	// hand-crafted prompts, env.SpaceTokens(space)).
	NewSpaceLearner func(space int, tokens []int) (Learner, error)
	// Shared selects the tensors the server aggregates (the rest stay on
	// the site).
	Shared federation.Filter
	// Strategy makes the server side from the initial parameters (nil:
	// FedAvg of the shared tensors).
	Strategy func(init tensor.Named) federation.Strategy
	// Receive, when set, installs what the server sent into a client's
	// parameters before training (default: copy the shared tensors) and
	// prepares the learner (a FedProx anchor, downloaded experts).
	Receive func(c *Client, in tensor.Named) error
	// Upload, when set, is what a client sends after training (default:
	// its shared tensors).
	Upload func(c *Client) tensor.Named
	// Prepare, when set, readies a learner for scoring the client
	// (default: l.Prepare()).
	Prepare func(c *Client, l Learner) error
	// Trained, when set, selects the parameters the training loop's
	// optimizer updates (default: all of P); AfterBackward then updates
	// the others itself (a second optimizer), after each batch's backward.
	Trained func(c *Client, name string) bool
	// BeforeStep, when set, runs before each training batch's learner Step
	// (after the batch's records are loaded) with the batch: per-batch draws
	// from its random generator (FedMVP's flip of the consistency view).
	BeforeStep    func(c *Client, b train.Batch) error
	AfterBackward func(c *Client, b train.Batch) error
	// Train, when set, turns the run's local-training settings into the
	// method's own (its section's lr, local epochs).
	Train func(run train.Options) train.Options
	// SaveExtra and LoadExtra keep method state beyond P in the client's
	// State (names must not start with "param/", "opt/" or "rng").
	SaveExtra func(c *Client) (tensor.Named, error)
	LoadExtra func(c *Client, st tensor.Named) error
	// Kept, when set, adds to what a site keeps for `pfedmma predict`
	// (Plan.Site: its parameters P) what its scoring uses beyond them
	// (pFedMoAP's downloaded experts), so that predict equals evaluation.
	Kept func(c *Client) (tensor.Named, error)
}

// Spaces keeps one learner per label space.
type Spaces struct {
	env  *methods.Env
	spec *Spec
	by   map[int]Learner
}

// Get returns the learner of a label space, building it the first time.
func (s *Spaces) Get(space int) (Learner, error) {
	if l, ok := s.by[space]; ok {
		return l, nil
	}
	words := s.spec.Words
	if words == "" {
		words = Placeholder(s.spec.Placeholder)
	}
	tokens, err := s.env.ClassPromptTokens(space, words)
	if err != nil {
		return nil, err
	}
	var l Learner
	if s.spec.NewSpaceLearner != nil {
		l, err = s.spec.NewSpaceLearner(space, tokens)
	} else {
		l, err = s.spec.NewLearner(tokens)
	}
	if err != nil {
		return nil, err
	}
	s.by[space] = l
	return l, nil
}

// Placeholder is CoOp's prompt prefix of n "X" words.
func Placeholder(n int) string { return strings.TrimSpace(strings.Repeat("X ", n)) }

// Build makes the clients and the strategy of a prompt method on env.
func Build(env *methods.Env, spec *Spec) (*methods.Plan, error) {
	if err := checkDepth(env, spec); err != nil {
		return nil, err
	}
	sp := &Spaces{env: env, spec: spec, by: map[int]Learner{}}
	first, err := sp.Get(env.Task.Clients[0].TrainSpace)
	if err != nil {
		return nil, err
	}
	init := first.Params().Clone() // drawn from the run seed
	if err := installInit(env, spec, init); err != nil {
		return nil, err
	}
	shared := tensor.Named{}
	for name, t := range init {
		if spec.Shared(name) {
			shared[name] = t.Clone()
		}
	}
	var st federation.Strategy
	if spec.Strategy != nil {
		st = spec.Strategy(init)
	} else {
		st = &strategy.FedAvg{Shared: spec.Shared, Initial: shared}
	}
	plan := &methods.Plan{Strategy: st}
	var clients []*Client
	opts := env.Train
	if spec.Train != nil {
		opts = spec.Train(opts)
	}
	for i := range env.Task.Clients {
		t := &env.Task.Clients[i]
		loop, err := train.NewLoop(opts, len(t.Train), env.Seed, uint64(t.ID)+1, fmt.Sprintf("%s client %d", spec.Name, t.ID))
		if err != nil {
			return nil, err
		}
		c := &Client{Env: env, Task: t, Spaces: sp, Spec: spec, P: init.Clone(), loop: loop}
		clients = append(clients, c)
		plan.Clients = append(plan.Clients, c)
	}
	plan.Site = func(i int) (tensor.Named, error) {
		out := clients[i].P.Clone()
		if spec.Kept != nil {
			extra, err := spec.Kept(clients[i])
			if err != nil {
				return nil, err
			}
			for k, v := range extra {
				if _, dup := out[k]; dup {
					return nil, fmt.Errorf("%s client %d: kept tensor %q is also a parameter", spec.Name, clients[i].Task.ID, k)
				}
				out[k] = v
			}
		}
		return out, nil
	}
	if g, ok := st.(interface{ Global() tensor.Named }); ok {
		plan.Global = g.Global
		// the global model: a new site's parameters after the server's
		// broadcast, scored without training
		plan.GlobalScorer = func() (eval.Scorer, error) {
			c := &Client{Env: env, Task: &protocol.ClientTask{ID: -1}, Spaces: sp, Spec: spec, P: init.Clone(), loop: clients[0].loop}
			if err := c.installGlobal(g.Global()); err != nil {
				return nil, err
			}
			return &scorer{c: c, ready: map[int]bool{}}, nil
		}
	}
	return plan, nil
}

// checkDepth refuses a run whose cache depth is not the one spec's
// learner reads: patch embeddings, the first block's input, or features.
func checkDepth(env *methods.Env, spec *Spec) error {
	switch {
	case spec.Embeddings && env.Start != methods.Embeddings:
		return fmt.Errorf("%s: needs the cached patch embeddings and frozen features (methods.Embeddings), the run caches depth %d", spec.Name, env.Start)
	case spec.Embeddings:
	case spec.Prefixes && env.Start != 0 && env.Start != 1:
		return fmt.Errorf("%s: needs the cached input of the first image block (depth 0 or 1), the run caches depth %d", spec.Name, env.Start)
	case !spec.Prefixes && env.Start != methods.Features && env.Start != methods.TokenFeatures:
		return fmt.Errorf("%s: needs cached image features, the run caches depth %d", spec.Name, env.Start)
	}
	return nil
}

// installInit copies the run's initial parameters (env.Init, when set)
// over init, each of init's tensors required at its shape.
func installInit(env *methods.Env, spec *Spec, init tensor.Named) error {
	if env.Init == nil {
		return nil
	}
	for name, t := range init {
		src, ok := env.Init[name]
		if !ok || !tensor.SameShape(src.Shape, t.Shape) {
			return fmt.Errorf("%s initial parameters: no %q of shape %v", spec.Name, name, t.Shape)
		}
		copy(t.Data, src.Data)
	}
	return nil
}

// Client is one site of a prompt method: its parameters P (reference
// names), optimizer and random state. Extra holds method-specific state a
// Receive hook keeps (downloaded experts); it is not saved.
type Client struct {
	Env    *methods.Env
	Task   *protocol.ClientTask
	Spaces *Spaces
	Spec   *Spec
	P      tensor.Named
	Extra  any
	loop   *train.Loop
	l      Learner
	labels []int
}

// ID implements federation.Client.
func (c *Client) ID() int { return c.Task.ID }

// NumExamples implements federation.Client.
func (c *Client) NumExamples() int { return len(c.Task.Train) }

// Params implements train.Learner: the client's tensors with the shared
// learner's gradient buffers.
func (c *Client) Params() []optim.Param {
	g := c.l.Grads()
	var ps []optim.Param
	for _, name := range slices.Sorted(maps.Keys(c.P)) {
		if c.Spec.Trained != nil && !c.Spec.Trained(c, name) {
			continue
		}
		ps = append(ps, optim.Param{Name: name, Value: c.P[name].Data, Grad: g[name].Data})
	}
	return ps
}

// Load copies the client's parameters into learner l.
func (c *Client) Load(l Learner) error {
	lp := l.Params()
	for name, t := range c.P {
		dst, ok := lp[name]
		if !ok || len(dst.Data) != len(t.Data) {
			return fmt.Errorf("%s client %d: learner has no %q of %d values", c.Spec.Name, c.Task.ID, name, len(t.Data))
		}
		copy(dst.Data, t.Data)
	}
	return nil
}

// Step implements train.Learner on cached image records.
func (c *Client) Step(ctx context.Context, b train.Batch) (float64, int, error) {
	if err := c.Env.TrainBatch(c.Task, b.Items, b.RNG, b.Round, b.Epoch); err != nil {
		return 0, 0, err
	}
	c.labels = c.labels[:0]
	for _, k := range b.Items {
		c.labels = append(c.labels, c.Task.Labels[k])
	}
	if err := c.Load(c.l); err != nil {
		return 0, 0, err
	}
	if c.Spec.BeforeStep != nil {
		if err := c.Spec.BeforeStep(c, b); err != nil {
			return 0, 0, err
		}
	}
	loss, _, logits, err := c.l.Step(c.Env.TrainBuf, c.labels)
	if err != nil {
		return 0, 0, err
	}
	if c.Spec.AfterBackward != nil {
		if err := c.Spec.AfterBackward(c, b); err != nil {
			return 0, 0, err
		}
	}
	C := len(logits) / len(c.labels)
	correct := 0
	for k, y := range c.labels {
		if eval.Argmax(logits[k*C:(k+1)*C]) == y {
			correct++
		}
	}
	return loss, correct, nil
}

// TrainOptions are the local-training settings the client trains with.
func (c *Client) TrainOptions() train.Options { return c.loop.Opts }

// Learner returns the learner of the client's training space.
func (c *Client) Learner() (Learner, error) { return c.Spaces.Get(c.Task.TrainSpace) }

// Fit installs what the server sent, trains locally and uploads the shared
// tensors.
func (c *Client) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	l, err := c.Learner()
	if err != nil {
		return federation.FitRes{}, err
	}
	c.l = l
	if c.Spec.Receive != nil {
		err = c.Spec.Receive(c, ins.Params)
	} else {
		err = c.ReceiveShared(ins.Params)
	}
	if err != nil {
		return federation.FitRes{}, err
	}
	bar := c.Env.StepBar(c.loop.Batches(), fmt.Sprintf("client %d batch", c.Task.ID))
	defer bar.Finish()
	c.loop.Progress = func(n int) { bar.AddItems(1, n) }
	m, err := c.loop.Run(ctx, ins.Round, c)
	if err != nil {
		return federation.FitRes{}, err
	}
	var up tensor.Named
	if c.Spec.Upload != nil {
		up = c.Spec.Upload(c)
	} else {
		up = tensor.Named{}
		for name, t := range c.P {
			if c.Spec.Shared(name) {
				up[name] = t.Clone()
			}
		}
	}
	return federation.FitRes{Params: up, NumExamples: len(c.Task.Train), Metrics: m}, nil
}

// installGlobal puts the server's tensors into a fresh client's parameters
// as its Fit would (Receive, or the shared tensors).
func (c *Client) installGlobal(global tensor.Named) error {
	l, err := c.Learner()
	if err != nil {
		return err
	}
	c.l = l
	if c.Spec.Receive != nil {
		return c.Spec.Receive(c, global)
	}
	return c.ReceiveShared(global)
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

// Evaluate installs what the strategy sent for the evaluation (the round's
// new global part, as Fit's Receive installs it; nothing when it sends
// nothing) and scores the client's parameters on its evaluation sets.
func (c *Client) Evaluate(ctx context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	if len(ins.Params) > 0 {
		if err := c.installGlobal(ins.Params); err != nil {
			return federation.EvaluateRes{}, err
		}
	}
	m, err := c.Env.Evaluate(ctx, &scorer{c: c, ready: map[int]bool{}}, c.Task)
	return federation.EvaluateRes{Metrics: m, NumExamples: len(c.Task.Train)}, err
}

// scorer prepares each label space's learner once per evaluation (the
// client's parameters loaded, text features computed).
type scorer struct {
	c     *Client
	ready map[int]bool
}

func (s *scorer) Logits(space int, img []float32, B int) ([]float32, error) {
	l, err := s.c.Spaces.Get(space)
	if err != nil {
		return nil, err
	}
	if !s.ready[space] {
		if err := s.c.Load(l); err != nil {
			return nil, err
		}
		if s.c.Spec.Prepare != nil {
			err = s.c.Spec.Prepare(s.c, l)
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

// State holds the parameters, the optimizer state and the random generator.
func (c *Client) State() (tensor.Named, error) {
	st, err := c.loop.State()
	if err != nil {
		return nil, err
	}
	for name, t := range c.P {
		st["param/"+name] = t.Clone()
	}
	if c.Spec.SaveExtra != nil {
		extra, err := c.Spec.SaveExtra(c)
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
		t, ok := st["param/"+name]
		if !ok || !tensor.SameShape(t.Shape, p.Shape) {
			return fmt.Errorf("%s client %d state: no %s of shape %v", c.Spec.Name, c.Task.ID, name, p.Shape)
		}
		copy(p.Data, t.Data)
	}
	if c.Spec.LoadExtra != nil {
		if err := c.Spec.LoadExtra(c, st); err != nil {
			return err
		}
	}
	return c.loop.LoadState(st)
}
