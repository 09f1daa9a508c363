package federation

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"path/filepath"
	"sort"
	"time"

	"github.com/pfedmma/pfedmma/tensor"
)

// ErrNoCheckpoint is returned (wrapped) by Resume when CheckpointDir holds no
// checkpoint.
var ErrNoCheckpoint = errors.New("no checkpoint to resume")

// RoundReport is what happened in one round.
type RoundReport struct {
	Round    int   `json:"round"`
	Selected []int `json:"selected"`
	// Fit holds each participant's training metrics; FitMean their
	// unweighted mean over participants.
	Fit     map[int]Metrics `json:"fit"`
	FitMean Metrics         `json:"fit_mean"`
	// Eval holds every client's evaluation after the round and EvalMean the
	// unweighted mean over clients; both nil in rounds without evaluation.
	Eval     map[int]Metrics `json:"eval"`
	EvalMean Metrics         `json:"eval_mean"`
	// BytesDown and BytesUp are the tensor payloads sent to and received
	// from the participants (PayloadBytes).
	BytesDown int64   `json:"bytes_down"`
	BytesUp   int64   `json:"bytes_up"`
	Seconds   float64 `json:"seconds"`
}

// History is the list of completed rounds.
type History struct {
	Rounds []RoundReport `json:"rounds"`
}

// LastEval returns the latest round that was evaluated.
func (h *History) LastEval() (RoundReport, bool) {
	for i := len(h.Rounds) - 1; i >= 0; i-- {
		if h.Rounds[i].Eval != nil {
			return h.Rounds[i], true
		}
	}
	return RoundReport{}, false
}

// Progress reports one finished client step inside a round.
type Progress struct {
	Round, Rounds int
	// Phase is "fit" or "eval".
	Phase       string
	ClientID    int
	Done, Total int
}

// Simulation runs a Strategy with in-process Clients, one client at a time.
type Simulation struct {
	Strategy Strategy
	Clients  []Client
	// Rounds is the total number of rounds (0..Rounds-1).
	Rounds int
	// Fraction of clients sampled per round after round 0, and the
	// sampler's seed (see Sampler).
	Fraction float64
	Seed     uint64
	// EvalEvery evaluates every client after rounds k-1, 2k-1, … and after
	// the last round; values ≤ 1 evaluate after every round.
	EvalEvery int
	// CheckpointDir, when set, receives CheckpointFile after every round.
	CheckpointDir string
	// OnRound, when set, is called after each round's checkpoint is written;
	// an error stops the run and is returned.
	OnRound func(RoundReport) error
	// Progress, when set, is called after each client's fit and evaluation.
	Progress func(Progress)
	// Logger receives one line per round; nil means slog.Default().
	Logger *slog.Logger
}

// Run starts from round 0 with the clients and strategy as they are, and
// returns the history of the completed rounds. It overwrites any checkpoint
// in CheckpointDir. On cancellation it stops between clients and returns the
// completed rounds with ctx's error; the in-memory clients may then hold a
// partial round, and Resume continues from the last checkpoint.
func (s *Simulation) Run(ctx context.Context) (*History, error) {
	byID, infos, err := s.setup()
	if err != nil {
		return nil, err
	}
	if err := s.Strategy.Init(infos); err != nil {
		return nil, fmt.Errorf("federation: %w", err)
	}
	return s.loop(ctx, 0, NewSampler(s.Fraction, s.Seed), &History{}, byID)
}

// Resume loads the checkpoint in CheckpointDir into the strategy, every
// client and the sampler, and continues from the round after it. The result
// is bit-identical to an uninterrupted Run. Without a checkpoint it returns
// an error wrapping ErrNoCheckpoint.
func (s *Simulation) Resume(ctx context.Context) (*History, error) {
	if s.CheckpointDir == "" {
		return nil, fmt.Errorf("federation resume: no CheckpointDir")
	}
	byID, infos, err := s.setup()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(s.CheckpointDir, CheckpointFile)
	ck, err := ReadCheckpoint(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("federation resume %s: %w", path, ErrNoCheckpoint)
	}
	if err != nil {
		return nil, fmt.Errorf("federation resume: %w", err)
	}
	if ck.Strategy != s.Strategy.Name() {
		return nil, fmt.Errorf("federation resume %s: checkpoint of strategy %q, running %q", path, ck.Strategy, s.Strategy.Name())
	}
	if len(ck.Clients) != len(byID) {
		return nil, fmt.Errorf("federation resume %s: checkpoint has %d clients, run has %d", path, len(ck.Clients), len(byID))
	}
	if ck.Seed != s.Seed || ck.Fraction != s.Fraction {
		s.logger().Warn("resuming with different sampler settings; the checkpoint's sampler state is used",
			"checkpoint_seed", ck.Seed, "seed", s.Seed, "checkpoint_fraction", ck.Fraction, "fraction", s.Fraction)
	}
	if err := s.Strategy.Init(infos); err != nil {
		return nil, fmt.Errorf("federation resume: %w", err)
	}
	if err := s.Strategy.LoadState(ck.StrategyState); err != nil {
		return nil, fmt.Errorf("federation resume %s: %w", path, err)
	}
	for _, info := range infos {
		st, ok := ck.Clients[info.ID]
		if !ok {
			return nil, fmt.Errorf("federation resume %s: no state for client %d", path, info.ID)
		}
		if err := byID[info.ID].LoadState(st); err != nil {
			return nil, fmt.Errorf("federation resume %s: client %d: %w", path, info.ID, err)
		}
	}
	smp := NewSampler(s.Fraction, s.Seed)
	if err := smp.UnmarshalBinary(ck.Sampler); err != nil {
		return nil, fmt.Errorf("federation resume %s: %w", path, err)
	}
	if len(ck.History.Rounds) != ck.NextRound {
		return nil, fmt.Errorf("federation resume %s: history holds %d rounds, next round is %d", path, len(ck.History.Rounds), ck.NextRound)
	}
	hist := ck.History
	s.logger().Info("resuming", "checkpoint", path, "next_round", ck.NextRound)
	return s.loop(ctx, ck.NextRound, smp, &hist, byID)
}

func (s *Simulation) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

func (s *Simulation) setup() (map[int]Client, []ClientInfo, error) {
	if s.Strategy == nil {
		return nil, nil, errors.New("federation: no strategy")
	}
	if len(s.Clients) == 0 {
		return nil, nil, errors.New("federation: no clients")
	}
	if s.Rounds < 0 || s.Fraction <= 0 {
		return nil, nil, fmt.Errorf("federation: rounds %d and fraction %g must be positive", s.Rounds, s.Fraction)
	}
	byID := make(map[int]Client, len(s.Clients))
	infos := make([]ClientInfo, 0, len(s.Clients))
	for _, c := range s.Clients {
		if _, dup := byID[c.ID()]; dup {
			return nil, nil, fmt.Errorf("federation: two clients with ID %d", c.ID())
		}
		byID[c.ID()] = c
		infos = append(infos, ClientInfo{ID: c.ID(), NumExamples: c.NumExamples()})
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].ID < infos[j].ID })
	return byID, infos, nil
}

func (s *Simulation) evalRound(r int) bool {
	return s.EvalEvery <= 1 || (r+1)%s.EvalEvery == 0 || r == s.Rounds-1
}

func (s *Simulation) loop(ctx context.Context, start int, smp *Sampler, hist *History, byID map[int]Client) (*History, error) {
	ids := make([]int, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for r := start; r < s.Rounds; r++ {
		if err := ctx.Err(); err != nil {
			return hist, fmt.Errorf("federation: stopped before round %d: %w", r, err)
		}
		t0 := time.Now()
		rep, err := s.round(ctx, r, smp.Sample(r, ids), ids, byID)
		if err != nil {
			return hist, fmt.Errorf("federation round %d: %w", r, err)
		}
		rep.Seconds = time.Since(t0).Seconds()
		hist.Rounds = append(hist.Rounds, rep)
		if s.CheckpointDir != "" {
			if err := s.checkpoint(r+1, smp, hist, ids, byID); err != nil {
				return hist, fmt.Errorf("federation round %d: %w", r, err)
			}
		}
		s.logger().Info("round done", "round", r, "clients", len(rep.Selected), "fit", rep.FitMean,
			"eval", rep.EvalMean, "bytes_down", rep.BytesDown, "bytes_up", rep.BytesUp, "seconds", rep.Seconds)
		if s.OnRound != nil {
			if err := s.OnRound(rep); err != nil {
				return hist, fmt.Errorf("federation round %d: %w", r, err)
			}
		}
	}
	return hist, nil
}

func (s *Simulation) round(ctx context.Context, r int, selected, all []int, byID map[int]Client) (RoundReport, error) {
	rep := RoundReport{Round: r, Selected: selected, Fit: map[int]Metrics{}}
	ins, err := s.Strategy.Configure(r, selected)
	if err != nil {
		return rep, err
	}
	results := make([]FitResult, 0, len(selected))
	for i, id := range selected {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		in := ins[id]
		if in == nil {
			in = tensor.Named{}
		}
		rep.BytesDown += PayloadBytes(in)
		out, m, err := byID[id].Fit(ctx, r, in)
		if err != nil {
			return rep, fmt.Errorf("client %d fit: %w", id, err)
		}
		rep.BytesUp += PayloadBytes(out)
		rep.Fit[id] = cloneMetrics(m)
		results = append(results, FitResult{ClientID: id, NumExamples: byID[id].NumExamples(), Params: out, Metrics: m})
		s.progress(Progress{Round: r, Rounds: s.Rounds, Phase: "fit", ClientID: id, Done: i + 1, Total: len(selected)})
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	if err := s.Strategy.Aggregate(r, results); err != nil {
		return rep, err
	}
	rep.FitMean = meanMetrics(rep.Fit)
	if !s.evalRound(r) {
		return rep, nil
	}
	rep.Eval = map[int]Metrics{}
	for i, id := range all {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		m, err := byID[id].Evaluate(ctx, r)
		if err != nil {
			return rep, fmt.Errorf("client %d evaluate: %w", id, err)
		}
		rep.Eval[id] = cloneMetrics(m)
		s.progress(Progress{Round: r, Rounds: s.Rounds, Phase: "eval", ClientID: id, Done: i + 1, Total: len(all)})
	}
	rep.EvalMean = meanMetrics(rep.Eval)
	return rep, nil
}

func (s *Simulation) progress(p Progress) {
	if s.Progress != nil {
		s.Progress(p)
	}
}

// cloneMetrics copies m, never returning nil, so that a report survives a
// JSON round trip unchanged.
func cloneMetrics(m map[string]float64) Metrics {
	if m == nil {
		return Metrics{}
	}
	return Metrics(maps.Clone(m))
}

// meanMetrics is, per metric name, the unweighted mean over the clients that
// report it, summed in client-ID order.
func meanMetrics(per map[int]Metrics) Metrics {
	ids := make([]int, 0, len(per))
	for id := range per {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	sum, cnt := Metrics{}, map[string]int{}
	for _, id := range ids {
		for k, v := range per[id] {
			sum[k] += v
			cnt[k]++
		}
	}
	for k := range sum {
		sum[k] /= float64(cnt[k])
	}
	return sum
}

func (s *Simulation) checkpoint(next int, smp *Sampler, hist *History, ids []int, byID map[int]Client) error {
	sb, err := smp.MarshalBinary()
	if err != nil {
		return fmt.Errorf("checkpoint: sampler: %w", err)
	}
	ck := &Checkpoint{
		NextRound: next, Strategy: s.Strategy.Name(), Seed: s.Seed, Fraction: s.Fraction,
		Sampler: sb, History: *hist, Clients: make(map[int]tensor.Named, len(ids)), StrategyState: s.Strategy.State(),
	}
	for _, id := range ids {
		st, err := byID[id].State()
		if err != nil {
			return fmt.Errorf("checkpoint: client %d state: %w", id, err)
		}
		ck.Clients[id] = st
	}
	return WriteCheckpoint(filepath.Join(s.CheckpointDir, CheckpointFile), ck)
}
