package adapt

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/tensor"
)

// clientLearner is a label space's Learner with the parameters a client
// loads into it, their gradients and the client's own domain (its site sets
// it before each step).
type clientLearner struct {
	l    *Learner
	p, g tensor.Named
	// own is the training client's domain, id its ID (errors).
	own, id int
}

func (s *clientLearner) Params() tensor.Named { return s.p }
func (s *clientLearner) Grads() tensor.Named  { return s.g }

// Step implements client.Learner: the loss and gradients of a batch of
// cached prefixes for the own domain.
func (s *clientLearner) Step(x0 []float32, labels []int) (float64, map[string]float64, []float32, error) {
	loss, terms, _, err := s.l.Step(s.p, s.g, x0, labels, s.own)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("adapt client %d: %w", s.id, err)
	}
	return loss, terms, s.l.logits[:len(labels)*s.l.C], nil
}

// Prepare implements client.Learner: the text features of the loaded
// parameters.
func (s *clientLearner) Prepare() error {
	_, err := s.l.TextFeatures(s.p)
	return err
}

// Logits implements client.Learner.
func (s *clientLearner) Logits(x0 []float32, B int) ([]float32, error) {
	lg, _, err := s.l.Logits(s.p, x0, B)
	return lg, err
}

// site is one ADAPT client's own part: its domain and the latest received
// copies of the other domains' text prompts that its EMA moves toward.
type site struct {
	c   *client.Client
	ema float64
	// Domain is the client's ADAPT domain index (into Domains(task)).
	Domain int
	// Recv holds the latest received text prompt of every other domain
	// that has been relayed (the EMA targets).
	Recv tensor.Named
}

// Trained implements client.Trainer: the own text prompt, the visual
// prompts and AdaLN (the EMA moves the other domains' prompts).
func (s *site) Trained(name string) bool {
	return !Relayed(name) || name == TextName(s.Domain)
}

// emaStep moves every external prompt of P toward its received copy:
// t ← α·t + (1−α)·t_received.
func emaStep(P, recv tensor.Named, ema float64) {
	a := float32(ema)
	for name, r := range recv {
		t := P[name].Data
		for i, v := range r.Data {
			t[i] = a*t[i] + (1-a)*v
		}
	}
}

// BeforeStep implements client.BeforeStepper: one EMA update of the
// external prompts, loaded into the learner with the client's domain.
func (s *site) BeforeStep(train.Batch) error {
	l, err := s.c.Learner()
	if err != nil {
		return err
	}
	emaStep(s.c.P, s.Recv, s.ema)
	sl := l.(*clientLearner)
	sl.own, sl.id = s.Domain, s.c.Task.ID
	return s.c.Load(l)
}

// Receive implements client.Receiver: the averaged tensors, and the
// relayed text prompts — averaged per domain — as the EMA targets of the
// other domains and, merged with the client's own copy, as its own
// domain's prompt.
func (s *site) Receive(in tensor.Named) error {
	c := s.c
	global, relayed, err := strategy.SplitRelayed(in)
	if err != nil {
		return fmt.Errorf("adapt client %d: %w", c.Task.ID, err)
	}
	if err := c.ReceiveShared(global); err != nil {
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
	own := TextName(s.Domain)
	if peers := by[own]; len(peers) > 0 {
		copy(c.P[own].Data, meanOf(append([]*tensor.Tensor{c.P[own]}, peers...)).Data)
	}
	delete(by, own)
	if s.Recv == nil {
		s.Recv = tensor.Named{}
	}
	for name, ts := range by {
		s.Recv[name] = meanOf(ts)
	}
	return nil
}

// Upload implements client.Uploader: its own text prompt, the visual
// prompts and AdaLN.
func (s *site) Upload() tensor.Named {
	up := tensor.Named{}
	for name, t := range s.c.P {
		if s.Trained(name) {
			up[name] = t.Clone()
		}
	}
	return up
}

// SaveExtra implements client.ExtraState: the received copies, as
// "recv/<name>".
func (s *site) SaveExtra() (tensor.Named, error) {
	st := tensor.Named{}
	for name, t := range s.Recv {
		st["recv/"+name] = t.Clone()
	}
	return st, nil
}

// LoadExtra implements client.ExtraState.
func (s *site) LoadExtra(st tensor.Named) error {
	recv := tensor.Named{}
	for k, t := range st {
		name, ok := strings.CutPrefix(k, "recv/")
		if !ok {
			continue
		}
		p, ok := s.c.P[name]
		if !ok || !Relayed(name) || !tensor.SameShape(t.Shape, p.Shape) {
			return fmt.Errorf("adapt client %d state: %s does not fit", s.c.Task.ID, k)
		}
		recv[name] = t.Clone()
	}
	s.Recv = recv
	return nil
}

// trainedParams pairs the tensors of P a client of domain own trains with
// their gradients in G, in name order (the fixture step's optimizer list).
func trainedParams(P, G tensor.Named, own int) []optim.Param {
	var ps []optim.Param
	for _, name := range slices.Sorted(maps.Keys(P)) {
		if !Relayed(name) || name == TextName(own) {
			ps = append(ps, optim.Param{Name: name, Value: P[name].Data, Grad: G[name].Data})
		}
	}
	return ps
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
