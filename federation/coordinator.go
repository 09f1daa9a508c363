package federation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/pfedmma/pfedmma/tensor"
)

// Coordinator drives federated rounds over ClientProxies: it samples the
// participants, asks the Strategy what each receives, collects their results
// (and failures), hands them to the Strategy's Aggregate, evaluates, and
// saves its own state after every round. It holds no data and no client's
// private tensors; clients keep their own state (see Site).
//
// The same Coordinator runs a simulation (LocalProxy over in-process
// clients) and a networked federation (proxies over gRPC): for the same
// strategy, clients and seeds both give bit-identical results.
type Coordinator struct {
	Strategy Strategy
	Proxies  []ClientProxy
	// Rounds is the total number of rounds (0..Rounds-1).
	Rounds int
	// Fraction of clients sampled per round after round 0, and the
	// sampler's seed (see Sampler).
	Fraction float64
	Seed     uint64
	// EvalEvery evaluates every client after rounds k-1, 2k-1, … and after
	// the last round; values ≤ 1 evaluate after every round.
	EvalEvery int
	// NoEvaluate skips every evaluation (a reference round: fit and
	// aggregate only).
	NoEvaluate bool
	// Store, when set, receives the coordinator's Checkpoint after every
	// round, and Resume reads it back.
	Store CheckpointStore
	// Parallel is how many clients are asked at once (≤ 1: one at a time,
	// as in-process clients that share buffers need).
	Parallel int
	// TolerateFailures turns a client's error into a Failure handed to the
	// Strategy instead of stopping the run; the round then needs MinFit
	// results (at least 1). RoundTimeout, when positive, bounds each round's
	// fit phase and each evaluation phase; late clients become failures.
	TolerateFailures bool
	MinFit           int
	RoundTimeout     time.Duration
	// Available, when set, says whether a client is reachable now: a
	// selected client that is not is recorded as a failure ("offline") at
	// once instead of being waited for (with TolerateFailures).
	Available func(id int) bool
	// Unavailable, when set, says why a client Available reports not
	// reachable is not ("revoked", "offline …"); its failure reads so.
	Unavailable func(id int) string
	// Departed, when set, says why a client left the schedule ("" when it
	// did not; a revoked site): from then on it is neither asked to train
	// nor to evaluate, and not a failure; RoundReport.Departed lists it.
	// Its leaving is logged once.
	Departed func(id int) string
	// RetryEvery, when positive, makes a round that got fewer than MinFit
	// answers wait and run again instead of ending the run: it waits until
	// Available reports enough of the selected clients (or, without
	// Available, RetryEvery), logging the missing clients every
	// RetryEvery.
	RetryEvery time.Duration
	// Name, when set, names a client in log lines.
	Name func(id int) string
	// FitConfig, when set, gives the per-round settings sent in FitIns.
	FitConfig func(round int) map[string]string
	// OnRound, when set, is called after each round's checkpoint is written;
	// an error stops the run and is returned.
	OnRound func(RoundReport) error
	// Progress, when set, is called after each client's fit and evaluation.
	Progress func(Progress)
	// PayloadBytes, when set, weighs a message's tensors as they travel
	// (compressed) for RoundReport.BytesDown and BytesUp; nil counts 4
	// bytes per value (the package's PayloadBytes).
	PayloadBytes func(tensor.Named) int64
	// Logger receives one line per round; nil means slog.Default().
	Logger *slog.Logger
	// EvaluateAlone asks every client through its own proxy even where
	// in-process clients could be evaluated together (GroupEvaluator).
	EvaluateAlone bool
	// Secure, when set, aggregates every round securely: the strategy
	// receives the one result Secure.Combine returns (see
	// SecureAggregator).
	Secure SecureAggregator
	// DropRate in [0, 1) is FLiP's client drop rate (its
	// --client_drop_rate, flcore/servers/server_base.py receive_results):
	// every selected client trains, then the updates of all but
	// ⌊(1−DropRate)·m⌋ of the round's m selected clients are discarded
	// (Dropped: drawn from Seed and the round), and the strategy aggregates
	// the rest, weighted among themselves. 0 drops nothing.
	DropRate float64
	// PersonalEval asks each selected client, right after its local
	// training, to score the model it just trained (before aggregation) on
	// its own evaluation sets (FitIns.Config PersonalEvalKey; Site does it),
	// and records FLiP's "personal" accuracy of the round: the kept
	// participants' accuracies weighted by their example counts
	// (RoundReport.Personal, PersonalMean).
	PersonalEval bool

	departed map[int]bool // clients Departed reported gone last round
}

// CheckpointStore keeps the coordinator's latest Checkpoint.
type CheckpointStore interface {
	// Save replaces the stored checkpoint atomically.
	Save(c *Checkpoint) error
	// Load returns the stored checkpoint, or an error wrapping
	// ErrNoCheckpoint when there is none.
	Load() (*Checkpoint, error)
}

// Run starts from round 0 with the proxies and strategy as they are, and
// returns the history of the completed rounds. On cancellation it stops
// between clients and returns the completed rounds with ctx's error; Resume
// continues from the last checkpoint.
func (c *Coordinator) Run(ctx context.Context) (*History, error) {
	byID, infos, err := c.setup()
	if err != nil {
		return nil, err
	}
	if err := c.Strategy.Init(infos); err != nil {
		return nil, fmt.Errorf("federation: %w", err)
	}
	return c.loop(ctx, 0, NewSampler(c.Fraction, c.Seed), &History{}, byID)
}

// Resume loads the stored checkpoint into the strategy and the sampler and
// continues from the round after it. Clients restore their own state (Site)
// when they are next asked. The result is bit-identical to an uninterrupted
// Run. Without a checkpoint it returns an error wrapping ErrNoCheckpoint.
func (c *Coordinator) Resume(ctx context.Context) (*History, error) {
	if c.Store == nil {
		return nil, fmt.Errorf("federation resume: no checkpoint store")
	}
	byID, infos, err := c.setup()
	if err != nil {
		return nil, err
	}
	ck, err := c.Store.Load()
	if err != nil {
		return nil, fmt.Errorf("federation resume: %w", err)
	}
	if ck.Strategy != c.Strategy.Name() {
		return nil, fmt.Errorf("federation resume: checkpoint of strategy %q, running %q", ck.Strategy, c.Strategy.Name())
	}
	ids := slices.Sorted(maps.Keys(byID))
	if !slices.Equal(slices.Sorted(slices.Values(ck.Clients)), ids) {
		return nil, fmt.Errorf("federation resume: checkpoint has clients %v, run has %v", ck.Clients, ids)
	}
	if ck.Seed != c.Seed || ck.Fraction != c.Fraction {
		c.logger().Warn("resuming with different sampler settings; the checkpoint's sampler state is used",
			"checkpoint_seed", ck.Seed, "seed", c.Seed, "checkpoint_fraction", ck.Fraction, "fraction", c.Fraction)
	}
	if err := c.Strategy.Init(infos); err != nil {
		return nil, fmt.Errorf("federation resume: %w", err)
	}
	if err := c.Strategy.LoadState(ck.StrategyState); err != nil {
		return nil, fmt.Errorf("federation resume: %w", err)
	}
	smp := NewSampler(c.Fraction, c.Seed)
	if err := smp.UnmarshalBinary(ck.Sampler); err != nil {
		return nil, fmt.Errorf("federation resume: %w", err)
	}
	if len(ck.History.Rounds) != ck.NextRound {
		return nil, fmt.Errorf("federation resume: history holds %d rounds, next round is %d", len(ck.History.Rounds), ck.NextRound)
	}
	hist := ck.History
	c.logger().Info("resuming", "next_round", ck.NextRound)
	return c.loop(ctx, ck.NextRound, smp, &hist, byID)
}

func (c *Coordinator) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

func (c *Coordinator) setup() (map[int]ClientProxy, []ClientInfo, error) {
	if c.Strategy == nil {
		return nil, nil, errors.New("federation: no strategy")
	}
	if len(c.Proxies) == 0 {
		return nil, nil, errors.New("federation: no clients")
	}
	if c.Rounds < 0 || c.Fraction <= 0 || c.Fraction > 1 {
		return nil, nil, fmt.Errorf("federation: rounds %d must be ≥ 0 and fraction %g in (0, 1]", c.Rounds, c.Fraction)
	}
	byID := make(map[int]ClientProxy, len(c.Proxies))
	infos := make([]ClientInfo, 0, len(c.Proxies))
	for _, p := range c.Proxies {
		if _, dup := byID[p.ID()]; dup {
			return nil, nil, fmt.Errorf("federation: two clients with ID %d", p.ID())
		}
		byID[p.ID()] = p
		infos = append(infos, ClientInfo{ID: p.ID(), NumExamples: p.NumExamples()})
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].ID < infos[j].ID })
	if n := NewSampler(c.Fraction, 0).Count(len(infos)); c.MinFit > n {
		// a sampled round that lost a client would wait for more answers
		// than it asked for, forever
		return nil, nil, fmt.Errorf("federation: --min-fit %d is more than the %d clients a round samples (fraction %g of %d)", c.MinFit, n, c.Fraction, len(infos))
	}
	if err := c.checkSecure(); err != nil {
		return nil, nil, err
	}
	if err := c.checkDrop(NewSampler(c.Fraction, 0).Count(len(infos))); err != nil {
		return nil, nil, err
	}
	return byID, infos, nil
}

func (c *Coordinator) evalRound(r int) bool {
	return !c.NoEvaluate && (c.EvalEvery <= 1 || (r+1)%c.EvalEvery == 0 || r == c.Rounds-1)
}

func (c *Coordinator) loop(ctx context.Context, start int, smp *Sampler, hist *History, byID map[int]ClientProxy) (*History, error) {
	ids := slices.Sorted(maps.Keys(byID))
	for r := start; r < c.Rounds; r++ {
		if err := ctx.Err(); err != nil {
			return hist, fmt.Errorf("federation: stopped before round %d: %w", r, err)
		}
		t0 := time.Now()
		selected := smp.Sample(r, ids)
		rep, err := c.round(ctx, r, selected, ids, byID)
		for errors.Is(err, errBelowMinFit) && c.RetryEvery > 0 {
			c.logger().Warn("round below --min-fit: waiting for the missing clients, then retrying the round",
				"round", r, "err", err, "missing", c.names(rep.Absent))
			if werr := c.waitAvailable(ctx, r, selected); werr != nil {
				return hist, fmt.Errorf("federation round %d: %w", r, werr)
			}
			t0 = time.Now()
			rep, err = c.round(ctx, r, selected, ids, byID)
		}
		if err != nil {
			return hist, fmt.Errorf("federation round %d: %w", r, err)
		}
		rep.Seconds = time.Since(t0).Seconds()
		hist.Rounds = append(hist.Rounds, rep)
		if c.Store != nil {
			if err := c.save(r+1, smp, hist, ids); err != nil {
				return hist, fmt.Errorf("federation round %d: %w", r, err)
			}
		}
		c.logger().Info("round done", "round", r, "clients", len(rep.Selected), "failures", len(rep.Failures),
			"fit", rep.FitMean, "eval", rep.EvalMean, "bytes_down", rep.BytesDown, "bytes_up", rep.BytesUp, "seconds", rep.Seconds)
		if c.OnRound != nil {
			if err := c.OnRound(rep); err != nil {
				return hist, fmt.Errorf("federation round %d: %w", r, err)
			}
		}
	}
	return hist, nil
}

// errBelowMinFit marks a round that got fewer answers than MinFit.
var errBelowMinFit = errors.New("too few clients answered")

// names returns the clients' names (their IDs without Name).
func (c *Coordinator) names(ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = fmt.Sprint(id)
		if c.Name != nil {
			out[i] = c.Name(id)
		}
	}
	return out
}

// waitAvailable waits until at least max(MinFit, 1) of the selected
// clients are available (or RetryEvery has passed, without Available),
// logging the missing ones every RetryEvery.
func (c *Coordinator) waitAvailable(ctx context.Context, r int, selected []int) error {
	need := max(c.MinFit, 1)
	if c.Available == nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(c.RetryEvery):
			return nil
		}
	}
	tk := time.NewTicker(min(c.RetryEvery, 100*time.Millisecond))
	defer tk.Stop()
	last := time.Now()
	for {
		var missing []int
		for _, id := range selected {
			if !c.Available(id) {
				missing = append(missing, id)
			}
		}
		if len(selected)-len(missing) >= need {
			return nil
		}
		if time.Since(last) >= c.RetryEvery {
			c.logger().Warn("still waiting for clients to reach --min-fit", "round", r, "need", need,
				"available", len(selected)-len(missing), "missing", c.names(missing))
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tk.C:
		}
	}
}

// call runs fn for each id, Parallel at a time (in id order when
// sequential), and returns each id's error. A cancelled ctx stops the
// sequential loop between clients.
func (c *Coordinator) call(ctx context.Context, ids []int, fn func(ctx context.Context, i, id int) error) []error {
	errs := make([]error, len(ids))
	if c.Parallel <= 1 {
		for i, id := range ids {
			if err := ctx.Err(); err != nil {
				for j := i; j < len(ids); j++ {
					errs[j] = err
				}
				break
			}
			errs[i] = fn(ctx, i, id)
		}
		return errs
	}
	sem := make(chan struct{}, c.Parallel)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = fn(ctx, i, id)
		}()
	}
	wg.Wait()
	return errs
}

// phase returns the context of one phase of a round (bounded by
// RoundTimeout when set).
func (c *Coordinator) phase(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.RoundTimeout > 0 {
		return context.WithTimeout(ctx, c.RoundTimeout)
	}
	return context.WithCancel(ctx)
}

func (c *Coordinator) round(ctx context.Context, r int, selected, all []int, byID map[int]ClientProxy) (RoundReport, error) {
	var departed []int
	selected, all, departed = c.present(r, selected, all)
	rep := RoundReport{Round: r, Selected: selected, Fit: map[int]Metrics{}, Departed: departed}
	ins, cfg, err := c.configureFit(r, selected)
	if err != nil {
		return rep, err
	}
	t0 := time.Now()
	res, errs := c.fit(ctx, r, selected, ins, cfg, byID)
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	results, failures, err := c.collectFit(r, selected, ins, res, errs, &rep)
	if err != nil {
		return rep, err
	}
	t1 := time.Now()
	rep.FitSeconds = t1.Sub(t0).Seconds()
	if results, err = c.combineSecure(ctx, r, results, &rep); err != nil {
		return rep, err
	}
	if err := c.Strategy.Aggregate(r, results, failures); err != nil {
		return rep, err
	}
	rep.AggregateSeconds = time.Since(t1).Seconds()
	if rr, ok := c.Strategy.(RoundReporter); ok {
		rep.Strategy = rr.RoundMetrics()
	}
	rep.FitMean = meanMetrics(rep.Fit)
	if !c.evalRound(r) {
		return rep, nil
	}
	return rep, c.evaluateRound(ctx, r, all, cfg, byID, &rep)
}

// configureFit asks the strategy for each selected client's parameters and
// builds the round's fit configuration (with secure aggregation's
// session, when on).
func (c *Coordinator) configureFit(r int, selected []int) (map[int]tensor.Named, map[string]string, error) {
	ins, err := c.Strategy.Configure(r, selected)
	if err != nil {
		return nil, nil, err
	}
	var cfg map[string]string
	if c.FitConfig != nil {
		cfg = c.FitConfig(r)
	}
	if cfg, err = c.beginSecure(r, selected, cfg); err != nil {
		return nil, nil, err
	}
	if c.PersonalEval {
		cfg = maps.Clone(cfg)
		if cfg == nil {
			cfg = map[string]string{}
		}
		cfg[PersonalEvalKey] = "1"
	}
	return ins, cfg, nil
}

// fit trains the selected clients in parallel, reporting progress as each
// answers; res[i] and errs[i] are selected[i]'s.
func (c *Coordinator) fit(ctx context.Context, r int, selected []int, ins map[int]tensor.Named, cfg map[string]string, byID map[int]ClientProxy) ([]FitRes, []error) {
	res := make([]FitRes, len(selected))
	var mu sync.Mutex
	done := 0
	fctx, cancel := c.phase(ctx)
	defer cancel()
	errs := c.call(fctx, selected, func(ctx context.Context, i, id int) error {
		in := ins[id]
		if in == nil {
			in = tensor.Named{}
		}
		if c.Available != nil && !c.Available(id) {
			return c.unavailable(id)
		}
		out, err := byID[id].Fit(ctx, FitIns{Round: r, Params: in, Config: cfg})
		if err != nil {
			return err
		}
		res[i] = out
		mu.Lock()
		done++
		c.progress(Progress{Round: r, Rounds: c.Rounds, Phase: "fit", ClientID: id, Done: done, Total: len(selected)})
		mu.Unlock()
		return nil
	})
	return res, errs
}

// collectFit records the clients' answers in rep (bytes, fit metrics,
// participants, failures) and returns those to aggregate; it refuses a
// failure when failures are not tolerated, and a round with fewer answers
// than MinFit.
func (c *Coordinator) collectFit(r int, selected []int, ins map[int]tensor.Named, res []FitRes, errs []error, rep *RoundReport) ([]FitResult, []Failure, error) {
	var results []FitResult
	var failures []Failure
	for i, id := range selected {
		if errs[i] != nil {
			if !c.TolerateFailures {
				return nil, nil, fmt.Errorf("client %d fit: %w", id, errs[i])
			}
			failures = append(failures, Failure{ClientID: id, Err: errs[i]})
			continue
		}
		rep.BytesDown += c.payloadBytes(ins[id])
		rep.BytesUp += c.payloadBytes(res[i].Params)
		rep.Fit[id] = cloneMetrics(res[i].Metrics)
		results = append(results, FitResult{ClientID: id, NumExamples: res[i].NumExamples, Params: res[i].Params, Metrics: res[i].Metrics})
		rep.Participants = append(rep.Participants, id)
	}
	results, dropped := c.drop(r, selected, results, rep)
	if len(failures) > 0 {
		rep.Failures = map[int]string{}
		for _, f := range failures {
			rep.Failures[f.ClientID] = f.Err.Error()
			rep.Absent = append(rep.Absent, f.ClientID)
			c.logger().Warn("client failed", "round", r, "client", f.ClientID, "err", f.Err)
		}
		if need := max(c.MinFit, 1); len(results) < need {
			return nil, nil, fmt.Errorf("%w: %d of %d selected clients answered, %d needed (missing %v)",
				errBelowMinFit, len(results), len(selected), need, c.names(rep.Absent))
		}
	}
	if need := max(c.MinFit, 1); len(rep.Departed) > 0 && len(failures) == 0 && len(results) < need {
		// every selected client left the schedule (Departed)
		return nil, nil, fmt.Errorf("%w: %d of %d selected clients answered, %d needed (left the schedule: %v)",
			errBelowMinFit, len(results), len(selected)+len(rep.Departed), need, c.names(rep.Departed))
	}
	c.personal(results, rep)
	return results, append(failures, dropped...), nil
}

// evaluateRound evaluates every client on the aggregated parameters and
// records the metrics, bytes and absences in rep.
func (c *Coordinator) evaluateRound(ctx context.Context, r int, all []int, cfg map[string]string, byID map[int]ClientProxy, rep *RoundReport) error {
	t2 := time.Now()
	eins, err := ConfigureEvaluate(c.Strategy, r, all)
	if err != nil {
		return fmt.Errorf("configure evaluate: %w", err)
	}
	var mu sync.Mutex
	done := 0
	ectx, cancel := c.phase(ctx)
	evals, errs := c.evaluate(ectx, all, byID, func(id int) EvaluateIns {
		return EvaluateIns{Round: r, Params: eins[id].Clone(), Config: cfg}
	}, func(id int) {
		mu.Lock()
		done++
		c.progress(Progress{Round: r, Rounds: c.Rounds, Phase: "eval", ClientID: id, Done: done, Total: len(all)})
		mu.Unlock()
	})
	cancel()
	if err := ctx.Err(); err != nil {
		return err
	}
	rep.Eval = map[int]Metrics{}
	for i, id := range all {
		if errs[i] != nil {
			if !c.TolerateFailures {
				return fmt.Errorf("client %d evaluate: %w", id, errs[i])
			}
			c.logger().Warn("client evaluation failed", "round", r, "client", id, "err", errs[i])
			if !slices.Contains(rep.Absent, id) {
				rep.Absent = append(rep.Absent, id)
				slices.Sort(rep.Absent)
			}
			continue
		}
		rep.Eval[id] = cloneMetrics(evals[i].Metrics)
		rep.BytesDown += c.payloadBytes(eins[id])
	}
	rep.EvalMean = meanMetrics(rep.Eval)
	rep.EvalSeconds = time.Since(t2).Seconds()
	return nil
}

// present drops the clients that Departed says left the schedule from
// selected and all, returning those of all that left; it logs each
// client's leaving (and return) once.
func (c *Coordinator) present(r int, selected, all []int) (sel, rest, departed []int) {
	if c.Departed == nil {
		return selected, all, nil
	}
	gone := map[int]string{}
	for _, id := range all {
		if why := c.Departed(id); why != "" {
			gone[id] = why
			departed = append(departed, id)
		}
	}
	if c.departed == nil {
		c.departed = map[int]bool{}
	}
	for _, id := range all {
		_, now := gone[id]
		if now != c.departed[id] {
			if now {
				c.logger().Warn("client left the schedule", "round", r, "client", c.names([]int{id})[0], "why", gone[id])
			} else {
				c.logger().Info("client back in the schedule", "round", r, "client", c.names([]int{id})[0])
			}
			c.departed[id] = now
		}
	}
	if len(gone) == 0 {
		return selected, all, nil
	}
	keep := func(ids []int) []int {
		return slices.DeleteFunc(slices.Clone(ids), func(id int) bool { _, ok := gone[id]; return ok })
	}
	return keep(selected), keep(all), departed
}

// errOffline is the failure of a client that Available reports offline.
var errOffline = errors.New("offline (heartbeat missed): not asked")

// unavailable is the failure of client id, which Available reports not
// reachable: Unavailable's reason, or errOffline.
func (c *Coordinator) unavailable(id int) error {
	if c.Unavailable != nil {
		if why := c.Unavailable(id); why != "" {
			return errors.New(why + ": not asked")
		}
	}
	return errOffline
}

func (c *Coordinator) payloadBytes(n tensor.Named) int64 {
	if c.PayloadBytes != nil {
		return c.PayloadBytes(n)
	}
	return PayloadBytes(n)
}

func (c *Coordinator) progress(p Progress) {
	if c.Progress != nil {
		c.Progress(p)
	}
}

func (c *Coordinator) save(next int, smp *Sampler, hist *History, ids []int) error {
	sb, err := smp.MarshalBinary()
	if err != nil {
		return fmt.Errorf("checkpoint: sampler: %w", err)
	}
	return c.Store.Save(&Checkpoint{
		NextRound: next, Strategy: c.Strategy.Name(), Seed: c.Seed, Fraction: c.Fraction,
		Sampler: sb, History: *hist, Clients: ids, StrategyState: c.Strategy.State(),
	})
}
