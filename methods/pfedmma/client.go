package pfedmma

import (
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/tensor"
)

// site is one pFedMMA site's own part of its client: its adapters (private
// down/up projections and the shared projections it last received, the
// client's parameters P themselves) attached to the shared frozen model,
// the text features of its current evaluation, and the run's group
// evaluation.
type site struct {
	c       *client.Client
	env     *methods.Env
	learner *Learner
	spaces  map[int]*clientLearner
	txt     map[int][]float32
	// group evaluates the run's clients together (nil: alone).
	group *evalGroup
}

// newSite gives client c its own adapters, loaded from c.P, and makes them
// its parameters.
func newSite(c *client.Client, env *methods.Env, init *Adapters, ws *Workspace, group *evalGroup) (*site, error) {
	a := New(init.Cfg, init.Dv, init.Dt, nil)
	if err := a.Load(c.P); err != nil {
		return nil, err
	}
	l, err := NewLearner(env.Model, a, ws)
	if err != nil {
		return nil, err
	}
	l.Split = env.Split()
	c.P = a.Params
	return &site{c: c, env: env, learner: l, spaces: map[int]*clientLearner{}, txt: map[int][]float32{}, group: group}, nil
}

// Learner implements client.Owner: the site's adapters for a label space.
func (s *site) Learner(space int) (client.Learner, error) {
	l, ok := s.spaces[space]
	if !ok {
		l = &clientLearner{s: s, space: space}
		s.spaces[space] = l
	}
	return l, nil
}

// Receive implements client.Receiver: the global shared projections, then
// the adapters attached and the class prompts of the training space set.
func (s *site) Receive(in tensor.Named) error {
	if err := s.c.ReceiveShared(in); err != nil {
		return err
	}
	s.learner.Attach()
	prefix, eot, err := s.env.SpacePrompts(s.c.Task.TrainSpace)
	if err != nil {
		return err
	}
	s.learner.SetClassPrefix(prefix, eot, len(eot))
	return nil
}

// EvalGroup implements client.Grouper: the clients of one run share a
// group when their adapters start at block ℓ ≥ 1.
func (s *site) EvalGroup() federation.GroupEval {
	if s.group == nil {
		return nil
	}
	return s.group
}

// textFeatures returns the site's text features of a label space, computed
// once per evaluation (s.txt is reset at its start).
func (s *site) textFeatures(space int) ([]float32, error) {
	if f, ok := s.txt[space]; ok {
		return f, nil
	}
	p, eot, err := s.env.SpacePrompts(space)
	if err != nil {
		return nil, err
	}
	s.learner.Attach()
	s.learner.SetClassPrefix(p, eot, len(eot))
	f := append([]float32(nil), s.learner.TextFeatures(false)...)
	s.txt[space] = f
	return f, nil
}

// clientLearner is a site's adapters as the client's learner of one label
// space.
type clientLearner struct {
	s     *site
	space int
}

func (l *clientLearner) Params() tensor.Named { return l.s.learner.Adapters.Params }
func (l *clientLearner) Grads() tensor.Named  { return l.s.learner.Adapters.Grads }

// Step trains every adapter parameter on a batch of cached (or online)
// prefixes, against the class prompts Receive set.
func (l *clientLearner) Step(img []float32, labels []int) (float64, map[string]float64, []float32, error) {
	l.s.learner.Adapters.ZeroGrads()
	loss, logits, err := l.s.learner.Step(img, len(labels), labels)
	return loss, nil, logits, err
}

// Prepare computes the space's text features with the site's adapters.
func (l *clientLearner) Prepare() error {
	delete(l.s.txt, l.space)
	_, err := l.s.textFeatures(l.space)
	return err
}

// Logits scores with the site's adapters, attaching them for every batch
// (the model's blocks are shared with other clients).
func (l *clientLearner) Logits(img []float32, B int) ([]float32, error) {
	s := l.s
	s.learner.Attach()
	sc := methods.CosineScorer{Model: s.env.Model, Text: s.textFeatures,
		Image: func(prefix []float32, B int) []float32 { return s.learner.ImageFeatures(prefix, B, false) }}
	return sc.Logits(l.space, img, B)
}
