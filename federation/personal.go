package federation

import (
	"context"
	"fmt"
	"maps"
	"math"
)

// PersonalEvalKey is the FitIns.Config key ("1") that asks a Site to score
// its client's freshly trained model, before the server aggregates it, on
// the client's own evaluation sets (Coordinator.PersonalEval).
const PersonalEvalKey = "personal_eval"

// PersonalPrefix prefixes, in a fit's metrics, the evaluation metrics of the
// client's freshly trained model ("personal/local", "personal/acc").
const PersonalPrefix = "personal/"

// PersonalMetric is the round's FLiP "personal" accuracy in
// RoundReport.PersonalMean (and in the run's results).
const PersonalMetric = "personal"

// PersonalOf returns the accuracy of a client's own test split among a
// fit's metrics: PersonalPrefix+"local" (base-to-novel's Local) or, without
// it, PersonalPrefix+"acc" (the other protocols' own-split accuracy).
func PersonalOf(m map[string]float64) (float64, bool) {
	for _, k := range []string{"local", "acc"} {
		if v, ok := m[PersonalPrefix+k]; ok {
			return v, true
		}
	}
	return 0, false
}

// personalEval scores the client's model as it is after the fit (nothing
// installed) and adds its metrics to res under PersonalPrefix, when ins
// asks for it.
func (s *Site) personalEval(ctx context.Context, ins FitIns, res *FitRes) error {
	if ins.Config[PersonalEvalKey] != "1" {
		return nil
	}
	ev, err := s.Client.Evaluate(ctx, EvaluateIns{Round: ins.Round, Config: ins.Config})
	if err != nil {
		return fmt.Errorf("client %d personal evaluation: %w", s.ID(), err)
	}
	res.Metrics = maps.Clone(res.Metrics)
	if res.Metrics == nil {
		res.Metrics = map[string]float64{}
	}
	for k, v := range ev.Metrics {
		res.Metrics[PersonalPrefix+k] = v
	}
	return nil
}

// personal records, when PersonalEval is on, each kept participant's
// personal accuracy (PersonalOf) in rep.Personal and their mean weighted by
// example counts in rep.PersonalMean: FLiP's eval_personal
// (flcore/utils.py), Σ_c w_c·top1_c over the round's active clients with
// w_c = n_c / Σ n (flcore/servers/server_base.py, receive_results). A
// client that reported none (or not a finite number) is left out, with a
// warning.
func (c *Coordinator) personal(results []FitResult, rep *RoundReport) {
	if !c.PersonalEval {
		return
	}
	var sum, n float64
	for _, res := range results {
		v, ok := PersonalOf(res.Metrics)
		if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
			c.logger().Warn("client reported no personal accuracy", "round", rep.Round, "client", c.names([]int{res.ClientID})[0])
			continue
		}
		if rep.Personal == nil {
			rep.Personal = map[int]float64{}
		}
		rep.Personal[res.ClientID] = v
		sum += float64(res.NumExamples) * v
		n += float64(res.NumExamples)
	}
	if n > 0 {
		rep.PersonalMean = Metrics{PersonalMetric: sum / n}
	}
}
