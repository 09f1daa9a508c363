package client

import (
	"fmt"
	"strings"

	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

// Spaces keeps one learner per label space, shared by a method's clients.
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
	l, err := s.spec.NewLearner(space, tokens)
	if err != nil {
		return nil, err
	}
	s.by[space] = l
	return l, nil
}

// Placeholder is CoOp's prompt prefix of n "X" words.
func Placeholder(n int) string { return strings.TrimSpace(strings.Repeat("X ", n)) }

// Build makes the clients (one per task client, in task order) and the
// strategy of spec's method on env. Every client starts from the first
// learner's parameters (drawn from the run seed), or env.Init.
func Build(env *methods.Env, spec *Spec) (*methods.Plan, error) {
	if err := checkInput(env, spec); err != nil {
		return nil, err
	}
	sp := &Spaces{env: env, spec: spec, by: map[int]Learner{}}
	init, err := initial(env, spec, sp)
	if err != nil {
		return nil, err
	}
	plan := &methods.Plan{Strategy: newStrategy(spec, init)}
	opts := env.Train
	if spec.Train != nil {
		opts = *spec.Train
	}
	ws := &methods.Workspaces{}
	var clients []*Client
	for i := range env.Task.Clients {
		t := &env.Task.Clients[i]
		loop, err := train.NewLoop(opts, len(t.Train), env.Seed, uint64(t.ID)+1, fmt.Sprintf("%s client %d", spec.Name, t.ID))
		if err != nil {
			return nil, err
		}
		c, err := newClient(env, t, sp, spec, init.Clone(), loop, ws)
		if err != nil {
			return nil, err
		}
		clients = append(clients, c)
		plan.Clients = append(plan.Clients, c)
	}
	plan.Site = func(i int) (tensor.Named, error) { return clients[i].keep() }
	if g, ok := plan.Strategy.(interface{ Global() tensor.Named }); ok {
		plan.Global = g.Global
		// the global model: a new site's parameters after the server's
		// broadcast, scored without training
		plan.GlobalScorer = func() (eval.Scorer, error) {
			c, err := newClient(env, &protocol.ClientTask{ID: -1}, sp, spec, init.Clone(), clients[0].loop, ws)
			if err != nil {
				return nil, err
			}
			if err := c.install(g.Global()); err != nil {
				return nil, err
			}
			return c.scorer(), nil
		}
	}
	return plan, nil
}

// initial is the parameters every client starts from: spec.Init's, or the
// first client's learner's (drawn from the run seed), with env.Init
// installed.
func initial(env *methods.Env, spec *Spec, sp *Spaces) (tensor.Named, error) {
	var init tensor.Named
	if spec.Init != nil {
		p, err := spec.Init()
		if err != nil {
			return nil, err
		}
		init = p.Clone()
	} else {
		first, err := sp.Get(env.Task.Clients[0].TrainSpace)
		if err != nil {
			return nil, err
		}
		init = first.Params().Clone() // drawn from the run seed
	}
	if err := installInit(env, spec, init); err != nil {
		return nil, err
	}
	return init, nil
}

// newStrategy is spec's strategy, or FedAvg of the shared tensors of init.
func newStrategy(spec *Spec, init tensor.Named) federation.Strategy {
	if spec.Strategy != nil {
		return spec.Strategy(init)
	}
	shared := tensor.Named{}
	for name, t := range init {
		if spec.Shared(name) {
			shared[name] = t.Clone()
		}
	}
	return &strategy.FedAvg{Shared: spec.Shared, Initial: shared}
}

// checkInput refuses a run whose cache depth is not the one spec's
// learners read: patch embeddings, the first block's input, or features.
func checkInput(env *methods.Env, spec *Spec) error {
	switch {
	case spec.Input == Embeddings && env.Start != methods.Embeddings:
		return fmt.Errorf("%s: needs the cached patch embeddings and frozen features (methods.Embeddings), the run caches depth %d", spec.Name, env.Start)
	case spec.Input == Embeddings:
	case spec.Input == Prefixes && env.Start != 0 && env.Start != 1:
		return fmt.Errorf("%s: needs the cached input of the first image block (depth 0 or 1), the run caches depth %d", spec.Name, env.Start)
	case spec.Input == Features && env.Start != methods.Features && env.Start != methods.TokenFeatures:
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
