package pfedmoap

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Nearest is the paper's expert selection: the ids of the k entries of pool
// (indexed by client id; nil = not uploaded yet) nearest to pool[self] by L2
// distance between the flattened prompts, nearest first, ties to the lower
// id; self is never selected. Fewer than k come back when fewer entries
// exist. dist holds the distance from pool[self] to every client (NaN where
// there is no entry, 0 at self). Call it on the pool as it stood at the
// start of the round (the authors' loop mixes in entries uploaded earlier in
// the same round).
func Nearest(pool [][]float32, self, k int) (ids []int, dist []float64, err error) {
	if self < 0 || self >= len(pool) || pool[self] == nil {
		return nil, nil, fmt.Errorf("pfedmoap: client %d has no pool entry", self)
	}
	if k < 0 {
		return nil, nil, fmt.Errorf("pfedmoap: %d experts requested", k)
	}
	own := pool[self]
	dist = make([]float64, len(pool))
	var cand []int
	for j, p := range pool {
		if p == nil {
			dist[j] = math.NaN()
			continue
		}
		if len(p) != len(own) {
			return nil, nil, fmt.Errorf("pfedmoap: pool entry %d has %d values, client %d's %d", j, len(p), self, len(own))
		}
		var s float64
		for i, v := range p {
			d := float64(v) - float64(own[i])
			s += d * d
		}
		dist[j] = math.Sqrt(s)
		if j != self {
			cand = append(cand, j)
		}
	}
	sort.SliceStable(cand, func(a, b int) bool { return dist[cand[a]] < dist[cand[b]] })
	return cand[:min(k, len(cand))], dist, nil
}

// Permutation is the random rule's client order: a permutation of 0..n−1
// drawn once (at start-up) from seed.
func Permutation(n int, seed uint64) []int {
	return rand.New(rand.NewPCG(seed, 0x5e1ec7)).Perm(n)
}

// Random is the authors' default selection rule ("random"): the first k
// clients of perm (Permutation) other than self that have a pool entry.
func Random(pool [][]float32, self, k int, perm []int) []int {
	var ids []int
	for _, j := range perm {
		if len(ids) == k {
			break
		}
		if j != self && j >= 0 && j < len(pool) && pool[j] != nil {
			ids = append(ids, j)
		}
	}
	return ids
}
