package federation

import (
	"context"
	"fmt"
)

// GroupEvaluator is a Client that can be evaluated together with other
// in-process clients of its group — the clients of one method on one frozen
// model in a simulation — so that what does not depend on the client (the
// frozen part of the model on the shared test images) is computed once for
// all of them. The result for each client must be exactly what its own
// Evaluate returns.
type GroupEvaluator interface {
	Client
	// EvalGroup returns the client's group: clients that return the same
	// non-nil GroupEval may be evaluated together by it; nil means the
	// client is evaluated alone.
	EvalGroup() GroupEval
}

// GroupEval evaluates several clients of one group at once.
type GroupEval interface {
	// EvaluateGroup scores clients[i] after round ins[i].Round as
	// clients[i].Evaluate(ctx, ins[i]) would, and returns one result and
	// one error per client.
	EvaluateGroup(ctx context.Context, clients []Client, ins []EvaluateIns) ([]EvaluateRes, []error)
}

// EvaluateSites is Site.Evaluate for several sites whose clients share the
// GroupEval g: each site is brought to its state after round ins[i].Round,
// g evaluates them together, and a site whose instruction carried tensors
// saves its state again, as Site.Evaluate does.
func EvaluateSites(ctx context.Context, g GroupEval, sites []*Site, ins []EvaluateIns) ([]EvaluateRes, []error) {
	res := make([]EvaluateRes, len(sites))
	errs := make([]error, len(sites))
	var idx []int
	var clients []Client
	var cins []EvaluateIns
	for i, s := range sites {
		if err := s.sync(ins[i].Round + 1); err != nil {
			errs[i] = err
			continue
		}
		idx = append(idx, i)
		clients = append(clients, s.Client)
		cins = append(cins, ins[i])
	}
	if len(idx) == 0 {
		return res, errs
	}
	out, oerrs := g.EvaluateGroup(ctx, clients, cins)
	if len(out) != len(clients) || len(oerrs) != len(clients) {
		err := fmt.Errorf("group evaluation returned %d results and %d errors for %d clients", len(out), len(oerrs), len(clients))
		for _, i := range idx {
			errs[i] = err
			sites[i].synced = false
		}
		return res, errs
	}
	for k, i := range idx {
		s := sites[i]
		if oerrs[k] != nil {
			if len(ins[i].Params) > 0 {
				s.synced = false // a partial install: reload next time
			}
			errs[i] = oerrs[k]
			continue
		}
		res[i] = out[k]
		if len(ins[i].Params) == 0 {
			continue
		}
		st, err := s.Client.State()
		if err != nil {
			errs[i] = fmt.Errorf("client %d state: %w", s.ID(), err)
			continue
		}
		if err := s.Store.Save(ins[i].Round, st); err != nil {
			errs[i] = err
			continue
		}
		s.at = ins[i].Round
	}
	return res, errs
}

// evalGroups splits the clients ids (positions into ids) into groups that
// can be evaluated together: in-process sites (no Available check, one
// client at a time) whose clients share a GroupEval. Clients that cannot
// are returned alone.
func (c *Coordinator) evalGroups(ids []int, byID map[int]ClientProxy) (groups [][]int, gevals []GroupEval) {
	at := map[GroupEval]int{}
	for i, id := range ids {
		var g GroupEval
		if !c.EvaluateAlone && c.Available == nil && c.Parallel <= 1 {
			if s, ok := byID[id].(*Site); ok {
				if ge, ok := s.Client.(GroupEvaluator); ok {
					g = ge.EvalGroup()
				}
			}
		}
		if g == nil {
			groups, gevals = append(groups, []int{i}), append(gevals, nil)
			continue
		}
		k, ok := at[g]
		if !ok {
			k = len(groups)
			at[g] = k
			groups, gevals = append(groups, nil), append(gevals, g)
		}
		groups[k] = append(groups[k], i)
	}
	return groups, gevals
}

// evaluate runs the evaluation phase of a round over the clients ids:
// alone through their proxies, or together for the groups of evalGroups.
// It returns one result and one error per client; done is called after
// each client evaluated without error.
func (c *Coordinator) evaluate(ctx context.Context, ids []int, byID map[int]ClientProxy, eins func(id int) EvaluateIns,
	done func(id int)) ([]EvaluateRes, []error) {
	evals := make([]EvaluateRes, len(ids))
	alone := func(ctx context.Context, i, id int) error {
		if c.Available != nil && !c.Available(id) {
			return c.unavailable(id)
		}
		out, err := byID[id].Evaluate(ctx, eins(id))
		if err != nil {
			return err
		}
		evals[i] = out
		done(id)
		return nil
	}
	groups, gevals := c.evalGroups(ids, byID)
	if len(groups) == len(ids) {
		// nothing to evaluate together
		return evals, c.call(ctx, ids, alone)
	}
	errs := make([]error, len(ids))
	for k, g := range groups {
		if err := ctx.Err(); err != nil {
			for _, i := range g {
				errs[i] = err
			}
			continue
		}
		if gevals[k] == nil || len(g) == 1 {
			errs[g[0]] = alone(ctx, g[0], ids[g[0]])
			continue
		}
		sites := make([]*Site, len(g))
		ins := make([]EvaluateIns, len(g))
		for j, i := range g {
			sites[j] = byID[ids[i]].(*Site)
			ins[j] = eins(ids[i])
		}
		out, gerrs := EvaluateSites(ctx, gevals[k], sites, ins)
		for j, i := range g {
			evals[i], errs[i] = out[j], gerrs[j]
			if gerrs[j] == nil {
				done(ids[i])
			}
		}
	}
	return evals, errs
}
