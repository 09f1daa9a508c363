package strategy

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/tensor"
)

// KNNPool is pFedMoAP's server. It keeps FedAvg's global prompt and a pool
// holding each client's latest upload. A client that has uploaded before
// receives the global tensors plus the pool entries of its K nearest other
// clients; a first-time participant receives the global tensors only.
//
// Distance: Euclidean (L2) distance between the flattened concatenation, in
// sorted name order, of the client's own pool entry and another's; ties go to
// the lower client ID. Neighbour r (0 = nearest) arrives under the names
// ExpertName(r, name). K is the number of neighbours sent: 0 sends none
// (a client then trains on the global tensors alone), a negative K every
// other pool entry.
//
// The global is the average of the participants' uploads, weighted by n_i
// (uniform when Uniform); participants then overwrite their pool entries.
//
// State keys: "global/<name>" and "pool/<id>/<name>".
type KNNPool struct {
	Shared  federation.Filter
	K       int
	Uniform bool
	Initial tensor.Named
	// Random picks, instead of the nearest entries, the first K other
	// clients with a pool entry in a permutation of the client IDs drawn
	// once from Seed (what the pFedMoAP authors' code runs by default).
	Random bool
	Seed   uint64

	clients clientSet
	global  tensor.Named
	pool    map[int]tensor.Named
}

// ExpertPrefix starts the names of the neighbour prompts KNNPool sends.
const ExpertPrefix = "expert/"

// ExpertName is the name under which neighbour rank's tensor name is sent.
func ExpertName(rank int, name string) string {
	return ExpertPrefix + strconv.Itoa(rank) + "/" + name
}

// SplitExperts separates a KNNPool message into the global tensors and the
// neighbours' tensors, nearest first.
func SplitExperts(in tensor.Named) (global tensor.Named, experts []tensor.Named, err error) {
	global = tensor.Named{}
	byRank := map[int]tensor.Named{}
	for k, v := range in {
		if !strings.HasPrefix(k, ExpertPrefix) {
			global[k] = v
			continue
		}
		rank, name, err := splitIndexed(k, ExpertPrefix)
		if err != nil {
			return nil, nil, err
		}
		if byRank[rank] == nil {
			byRank[rank] = tensor.Named{}
		}
		byRank[rank][name] = v
	}
	for r := 0; r < len(byRank); r++ {
		e, ok := byRank[r]
		if !ok {
			return nil, nil, fmt.Errorf("expert ranks are not 0..%d: rank %d missing", len(byRank)-1, r)
		}
		experts = append(experts, e)
	}
	return global, experts, nil
}

// PerClient reports that the strategy keeps each client's tensors (its
// pool): robust aggregation, which hands the strategy one synthetic result,
// cannot serve it.
func (s *KNNPool) PerClient() bool { return true }

// Name is "knn-pool".
func (s *KNNPool) Name() string { return "knn-pool" }

// Init checks the clients, empties the pool and sets the global to Initial.
func (s *KNNPool) Init(clients []federation.ClientInfo) error {
	cs, err := newClientSet(clients)
	if err != nil {
		return fmt.Errorf("knn-pool init: %w", err)
	}
	s.clients, s.pool = cs, map[int]tensor.Named{}
	if s.global, err = initialGlobal(s.Initial, s.Shared); err != nil {
		return fmt.Errorf("knn-pool init: %w", err)
	}
	return nil
}

// Neighbours returns the IDs of the pool entries sent to client id, nearest
// first (none when id has no pool entry yet).
func (s *KNNPool) Neighbours(id int) ([]int, error) {
	own, ok := s.pool[id]
	if !ok {
		return nil, nil
	}
	if s.Random {
		ids := slices.Sorted(maps.Keys(s.clients))
		var out []int
		for _, j := range rand.New(rand.NewPCG(s.Seed, 0x5e1ec7)).Perm(len(ids)) {
			other := ids[j]
			if _, has := s.pool[other]; has && other != id && (s.K < 0 || len(out) < s.K) {
				out = append(out, other)
			}
		}
		return out, nil
	}
	names := sortedNames(own)
	type cand struct {
		id int
		d  float64
	}
	var cands []cand
	for other, entry := range s.pool {
		if other == id {
			continue
		}
		var d float64
		for _, n := range names {
			a, b := own[n], entry[n]
			if b == nil || len(a.Data) != len(b.Data) {
				return nil, fmt.Errorf("pool entries of clients %d and %d differ in %q", id, other, n)
			}
			for i := range a.Data {
				x := float64(a.Data[i]) - float64(b.Data[i])
				d += x * x
			}
		}
		if len(entry) != len(own) {
			return nil, fmt.Errorf("pool entries of clients %d and %d hold different names", id, other)
		}
		cands = append(cands, cand{other, d})
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].d != cands[j].d {
			return cands[i].d < cands[j].d
		}
		return cands[i].id < cands[j].id
	})
	if s.K >= 0 && len(cands) > s.K {
		cands = cands[:s.K]
	}
	ids := make([]int, len(cands))
	for i, c := range cands {
		ids[i] = c.id
	}
	return ids, nil
}

// Configure sends each selected client the global tensors and, if it has a
// pool entry, its nearest neighbours' entries.
func (s *KNNPool) Configure(round int, selected []int) (map[int]tensor.Named, error) {
	out := make(map[int]tensor.Named, len(selected))
	for _, id := range selected {
		if !s.clients[id] {
			return nil, fmt.Errorf("knn-pool round %d: unknown client %d", round, id)
		}
		msg := s.global.Clone()
		if msg == nil {
			msg = tensor.Named{}
		}
		nb, err := s.Neighbours(id)
		if err != nil {
			return nil, fmt.Errorf("knn-pool round %d: %w", round, err)
		}
		for rank, other := range nb {
			for name, t := range s.pool[other] {
				msg[ExpertName(rank, name)] = t.Clone()
			}
		}
		out[id] = msg
	}
	return out, nil
}

// Aggregate averages the uploads into the global and updates the pool.
func (s *KNNPool) Aggregate(round int, results []federation.FitResult, failures []federation.Failure) error {
	if err := s.clients.checkResults(results); err != nil {
		return fmt.Errorf("knn-pool round %d: %w", round, err)
	}
	if err := checkUploads(results, s.Shared.Match); err != nil {
		return fmt.Errorf("knn-pool round %d: %w", round, err)
	}
	g, err := mean(results, s.Shared.Match, s.Uniform)
	if err != nil {
		return fmt.Errorf("knn-pool round %d: %w", round, err)
	}
	s.global = g
	for _, r := range results {
		s.pool[r.ClientID] = r.Params.Clone()
	}
	return nil
}

// State returns the global and the pool.
func (s *KNNPool) State() tensor.Named {
	st := tensor.Named{}
	withPrefix(st, "global/", s.global)
	for id, e := range s.pool {
		withPrefix(st, "pool/"+strconv.Itoa(id)+"/", e)
	}
	return st
}

// LoadState restores State; pool entries must belong to known clients.
func (s *KNNPool) LoadState(st tensor.Named) error {
	g, err := loadGlobal(st, s.Shared, []string{"pool/"})
	if err != nil {
		return fmt.Errorf("knn-pool load state: %w", err)
	}
	pool, err := loadIndexed(st, "pool/", s.clients, s.Shared)
	if err != nil {
		return fmt.Errorf("knn-pool load state: %w", err)
	}
	s.global, s.pool = g, pool
	return nil
}

// loadIndexed extracts "<prefix><id>/<name>" entries of st.
func loadIndexed(st tensor.Named, prefix string, clients clientSet, shared federation.Filter) (map[int]tensor.Named, error) {
	out := map[int]tensor.Named{}
	for _, k := range sortedNames(st) {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		id, name, err := splitIndexed(k, prefix)
		if err != nil {
			return nil, err
		}
		if !clients[id] {
			return nil, fmt.Errorf("entry %q: unknown client %d", k, id)
		}
		if !shared.Match(name) {
			return nil, fmt.Errorf("entry %q: %q is not a shared tensor", k, name)
		}
		if st[k] == nil || tensor.Numel(st[k].Shape) != len(st[k].Data) {
			return nil, fmt.Errorf("entry %q: shape does not match data", k)
		}
		if out[id] == nil {
			out[id] = tensor.Named{}
		}
		out[id][name] = st[k].Clone()
	}
	return out, nil
}
