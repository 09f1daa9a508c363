package strategy

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/tensor"
)

// Relay is ADAPT's server: tensors selected by Relayed (each client's own
// text prompt) are not averaged but kept per client and forwarded to every
// other client; all other uploaded tensors selected by Averaged (nil: all of
// them; the visual prompts, AdaLN) are averaged over the participants,
// uniformly unless Weighted, into one global copy.
//
// Each selected client receives the global tensors and the latest relayed
// tensors of every other client that has uploaded, client j's tensor name
// under RelayName(j, name). A client's own relayed tensors are not sent back.
//
// State keys: "global/<name>" and "relay/<id>/<name>".
type Relay struct {
	Averaged federation.Filter
	Relayed  federation.Filter
	Weighted bool
	Initial  tensor.Named

	clients clientSet
	global  tensor.Named
	relayed map[int]tensor.Named
}

// RelayPrefix starts the names of relayed tensors.
const RelayPrefix = "relay/"

// RelayName is the name under which client id's tensor name is relayed.
func RelayName(id int, name string) string {
	return RelayPrefix + strconv.Itoa(id) + "/" + name
}

// SplitRelayed separates a Relay message into the global tensors and the
// relayed tensors by source client.
func SplitRelayed(in tensor.Named) (global tensor.Named, relayed map[int]tensor.Named, err error) {
	global, relayed = tensor.Named{}, map[int]tensor.Named{}
	for k, v := range in {
		if !strings.HasPrefix(k, RelayPrefix) {
			global[k] = v
			continue
		}
		id, name, err := splitIndexed(k, RelayPrefix)
		if err != nil {
			return nil, nil, err
		}
		if relayed[id] == nil {
			relayed[id] = tensor.Named{}
		}
		relayed[id][name] = v
	}
	return global, relayed, nil
}

// Name is "relay".
func (s *Relay) Name() string { return "relay" }

// PerClient reports that the strategy keeps each client's relayed tensors:
// robust aggregation, which hands the strategy one synthetic result, cannot
// serve it.
func (s *Relay) PerClient() bool { return true }

func (s *Relay) isAveraged(name string) bool {
	return !s.Relayed.Match(name) && s.Averaged.Match(name)
}

// Init checks the clients and sets the global to Initial.
func (s *Relay) Init(clients []federation.ClientInfo) error {
	if s.Relayed == nil {
		return fmt.Errorf("relay init: no Relayed filter")
	}
	cs, err := newClientSet(clients)
	if err != nil {
		return fmt.Errorf("relay init: %w", err)
	}
	s.clients, s.relayed = cs, map[int]tensor.Named{}
	if s.global, err = initialGlobal(s.Initial, s.isAveraged); err != nil {
		return fmt.Errorf("relay init: %w", err)
	}
	return nil
}

// Configure sends each selected client the global tensors and the other
// clients' relayed tensors.
func (s *Relay) Configure(round int, selected []int) (map[int]tensor.Named, error) {
	out := make(map[int]tensor.Named, len(selected))
	for _, id := range selected {
		if !s.clients[id] {
			return nil, fmt.Errorf("relay round %d: unknown client %d", round, id)
		}
		msg := s.global.Clone()
		if msg == nil {
			msg = tensor.Named{}
		}
		for other, e := range s.relayed {
			if other == id {
				continue
			}
			for name, t := range e {
				msg[RelayName(other, name)] = t.Clone()
			}
		}
		out[id] = msg
	}
	return out, nil
}

// Aggregate averages the averaged names and stores the relayed ones.
func (s *Relay) Aggregate(round int, results []federation.FitResult, failures []federation.Failure) error {
	if err := s.clients.checkResults(results); err != nil {
		return fmt.Errorf("relay round %d: %w", round, err)
	}
	shared := func(n string) bool { return s.Relayed.Match(n) || s.Averaged.Match(n) }
	if err := checkUploads(results, shared); err != nil {
		return fmt.Errorf("relay round %d: %w", round, err)
	}
	g, err := mean(results, s.isAveraged, !s.Weighted)
	if err != nil {
		return fmt.Errorf("relay round %d: %w", round, err)
	}
	if len(g) > 0 {
		s.global = g
	}
	for _, r := range results {
		e := tensor.Named{}
		for k, v := range r.Params {
			if s.Relayed.Match(k) {
				e[k] = v.Clone()
			}
		}
		if len(e) > 0 {
			s.relayed[r.ClientID] = e
		}
	}
	return nil
}

// State returns the global and the relayed tensors.
func (s *Relay) State() tensor.Named {
	st := tensor.Named{}
	withPrefix(st, "global/", s.global)
	for id, e := range s.relayed {
		withPrefix(st, RelayPrefix+strconv.Itoa(id)+"/", e)
	}
	return st
}

// LoadState restores State.
func (s *Relay) LoadState(st tensor.Named) error {
	g, err := loadGlobal(st, s.isAveraged, []string{RelayPrefix})
	if err != nil {
		return fmt.Errorf("relay load state: %w", err)
	}
	rel, err := loadIndexed(st, RelayPrefix, s.clients, s.Relayed)
	if err != nil {
		return fmt.Errorf("relay load state: %w", err)
	}
	s.global, s.relayed = g, rel
	return nil
}
