package strategy

import (
	"fmt"
	"strings"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/tensor"
)

// FedAvg keeps one global copy of the shared tensors: every selected client
// receives it, and the uploads of the participants replace it by their
// average, weighted by n_i / Σ_{k in round} n_k (or 1/|round| when Uniform).
//
// Shared names which tensors may be uploaded (nil: all): pFedMMA shares its
// shared projections, PromptFL one prompt, FedPGP sigma, CLIP-Adapter and
// CLIP-LoRA everything trained. An upload holding any other name is an error.
// Before the first aggregation clients receive Initial (restricted to shared
// names), or nothing when Initial is nil.
//
// State keys: "global/<name>".
type FedAvg struct {
	Shared  federation.Filter
	Uniform bool
	Initial tensor.Named
	// EvaluateGlobal sends every client the new global tensors for its
	// evaluation after each round (ConfigureEvaluate), where the method's
	// clients score [global; their own private part] (FedOTP,
	// CLIP-Adapter); otherwise clients evaluate what they hold.
	EvaluateGlobal bool

	clients clientSet
	global  tensor.Named
}

// UniformMean is FedAvg with uniform weights, FedOT's server rule
// w_g ← (1/N) Σ_i w_g^(i).
func UniformMean(shared federation.Filter, initial tensor.Named) *FedAvg {
	return &FedAvg{Shared: shared, Uniform: true, Initial: initial}
}

// Name is "fedavg", or "uniform-mean" with uniform weights.
func (s *FedAvg) Name() string {
	if s.Uniform {
		return "uniform-mean"
	}
	return "fedavg"
}

// Init checks the clients and sets the global tensors to Initial.
func (s *FedAvg) Init(clients []federation.ClientInfo) error {
	cs, err := newClientSet(clients)
	if err != nil {
		return fmt.Errorf("%s init: %w", s.Name(), err)
	}
	s.clients = cs
	s.global, err = initialGlobal(s.Initial, s.Shared)
	if err != nil {
		return fmt.Errorf("%s init: %w", s.Name(), err)
	}
	return nil
}

// initialGlobal validates and copies an initial global.
func initialGlobal(initial tensor.Named, shared federation.Filter) (tensor.Named, error) {
	for _, k := range sortedNames(initial) {
		if !shared.Match(k) {
			return nil, fmt.Errorf("initial tensor %q is not shared", k)
		}
	}
	return initial.Clone(), nil
}

// Global returns a deep copy of the current global tensors (nil before the
// first aggregation when there is no Initial).
func (s *FedAvg) Global() tensor.Named {
	if s.global == nil {
		return nil
	}
	return s.global.Clone()
}

// Configure sends every selected client a copy of the global tensors.
func (s *FedAvg) Configure(round int, selected []int) (map[int]tensor.Named, error) {
	out := make(map[int]tensor.Named, len(selected))
	for _, id := range selected {
		if !s.clients[id] {
			return nil, fmt.Errorf("%s round %d: unknown client %d", s.Name(), round, id)
		}
		out[id] = s.global.Clone()
	}
	return out, nil
}

// ConfigureEvaluate implements federation.EvaluateConfigurer: with
// EvaluateGlobal, every client receives a copy of the global tensors;
// otherwise nothing.
func (s *FedAvg) ConfigureEvaluate(round int, clients []int) (map[int]tensor.Named, error) {
	if !s.EvaluateGlobal || s.global == nil {
		return nil, nil
	}
	out := make(map[int]tensor.Named, len(clients))
	for _, id := range clients {
		if !s.clients[id] {
			return nil, fmt.Errorf("%s round %d: unknown client %d", s.Name(), round, id)
		}
		out[id] = s.global.Clone()
	}
	return out, nil
}

// Aggregate replaces the global tensors by the participants' average.
func (s *FedAvg) Aggregate(round int, results []federation.FitResult, failures []federation.Failure) error {
	if err := s.clients.checkResults(results); err != nil {
		return fmt.Errorf("%s round %d: %w", s.Name(), round, err)
	}
	if err := checkUploads(results, s.Shared.Match); err != nil {
		return fmt.Errorf("%s round %d: %w", s.Name(), round, err)
	}
	g, err := mean(results, s.Shared.Match, s.Uniform)
	if err != nil {
		return fmt.Errorf("%s round %d: %w", s.Name(), round, err)
	}
	s.global = g
	return nil
}

// State returns the global tensors as "global/<name>".
func (s *FedAvg) State() tensor.Named {
	st := tensor.Named{}
	withPrefix(st, "global/", s.global)
	return st
}

// LoadState restores State.
func (s *FedAvg) LoadState(st tensor.Named) error {
	g, err := loadGlobal(st, s.Shared, nil)
	if err != nil {
		return fmt.Errorf("%s load state: %w", s.Name(), err)
	}
	s.global = g
	return nil
}

// loadGlobal extracts "global/<name>" entries of st; entries with a prefix in
// other are left to the caller, any other entry is an error.
func loadGlobal(st tensor.Named, shared federation.Filter, other []string) (tensor.Named, error) {
	g := tensor.Named{}
	for _, k := range sortedNames(st) {
		name, ok := strings.CutPrefix(k, "global/")
		if !ok {
			known := false
			for _, p := range other {
				known = known || strings.HasPrefix(k, p)
			}
			if !known {
				return nil, fmt.Errorf("unexpected entry %q", k)
			}
			continue
		}
		if !shared.Match(name) {
			return nil, fmt.Errorf("entry %q: %q is not a shared tensor", k, name)
		}
		if st[k] == nil || tensor.Numel(st[k].Shape) != len(st[k].Data) {
			return nil, fmt.Errorf("entry %q: shape does not match data", k)
		}
		g[name] = st[k].Clone()
	}
	if len(g) == 0 {
		return nil, nil
	}
	return g, nil
}
