package federation

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
)

// dropStream is the PCG stream constant of the client drop (xored with the
// round), distinct from the sampler's.
const dropStream = 0x6a09e667f3bcc909

// errDropped is the Failure a strategy receives for a client whose update
// the round's client drop discarded (Coordinator.DropRate).
var errDropped = errors.New("update dropped (federation.client_drop_rate)")

// DropKeep is how many of m selected clients a round keeps at drop rate:
// ⌊(1−rate)·m⌋, FLiP's int((1 - client_drop_rate) * cur_join_clients)
// (flcore/servers/server_base.py, receive_results), computed in float64 as
// Python does.
func DropKeep(rate float64, m int) int {
	return int((1 - rate) * float64(m))
}

// Dropped returns the clients of selected (any order) whose updates round
// drops at rate, in ascending order: all but DropKeep(rate, m) of them (at
// least one kept), the kept ones drawn uniformly without replacement — as
// FLiP's random.sample(selected_client_ids, keep) — by a partial
// Fisher–Yates shuffle of the sorted ids from a PCG generator seeded with
// (seed, dropStream ⊕ round). The draw depends only on the seed, the round
// and the selected clients, so a resumed or retried round, and a federation
// over the network, drop the same clients. Rate 0 drops none.
func Dropped(seed uint64, round int, selected []int, rate float64) []int {
	pool := slices.Clone(selected)
	slices.Sort(pool)
	keep := max(1, DropKeep(rate, len(pool)))
	if rate <= 0 || keep >= len(pool) {
		return nil
	}
	r := rand.New(rand.NewPCG(seed, dropStream^uint64(round)))
	for i := 0; i < keep; i++ {
		j := i + r.IntN(len(pool)-i)
		pool[i], pool[j] = pool[j], pool[i]
	}
	out := pool[keep:]
	slices.Sort(out)
	return out
}

// checkDrop refuses a drop rate outside [0, 1), one that keeps fewer than
// max(MinFit, 1) of the n clients a round samples, and one with secure
// aggregation (over the network its survivors are the sites whose masked
// update arrived, dropped or not).
func (c *Coordinator) checkDrop(n int) error {
	if c.DropRate == 0 {
		return nil
	}
	if !(c.DropRate > 0 && c.DropRate < 1) {
		return fmt.Errorf("federation: federation.client_drop_rate %v not in [0, 1)", c.DropRate)
	}
	if keep, need := DropKeep(c.DropRate, n), max(c.MinFit, 1); keep < need {
		return fmt.Errorf("federation: federation.client_drop_rate %v keeps ⌊(1−%v)·%d⌋ = %d of the %d clients a round samples, fewer than the %d a round needs",
			c.DropRate, c.DropRate, n, keep, n, need)
	}
	if c.Secure != nil {
		return errors.New("federation: federation.client_drop_rate with federation.secure_aggregation: the secure sum would still hold the dropped sites' masked updates; use one or the other")
	}
	return nil
}

// drop removes from results the uploads of the clients Dropped picks among
// selected, records them in rep (Dropped; not participants, their training
// metrics left out of Fit as FLiP leaves their losses out), and returns the
// kept results and a Failure (errDropped) for each dropped client, which
// the strategy receives with the round's failures. A client that failed is
// a failure, not dropped.
func (c *Coordinator) drop(r int, selected []int, results []FitResult, rep *RoundReport) ([]FitResult, []Failure) {
	gone := Dropped(c.Seed, r, selected, c.DropRate)
	if len(gone) == 0 {
		return results, nil
	}
	var kept []FitResult
	var fails []Failure
	for _, res := range results {
		if !slices.Contains(gone, res.ClientID) {
			kept = append(kept, res)
			continue
		}
		fails = append(fails, Failure{ClientID: res.ClientID, Err: errDropped})
		rep.Dropped = append(rep.Dropped, res.ClientID)
		delete(rep.Fit, res.ClientID)
		rep.Participants = slices.DeleteFunc(rep.Participants, func(id int) bool { return id == res.ClientID })
	}
	if len(fails) > 0 {
		c.logger().Info("client drop", "round", r, "dropped", c.names(rep.Dropped))
	}
	return kept, fails
}
