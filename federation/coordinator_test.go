package federation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/tensor"
)

// meanStrategy is FedAvg on one shared tensor "g" of two values: it sends
// g to every selected client, replaces g by the uploads' mean weighted by
// their example counts, and records what it saw.
type meanStrategy struct {
	g        []float32
	infos    []ClientInfo
	results  [][]int // each round's result client IDs
	failures [][]int // each round's failure client IDs
}

func (s *meanStrategy) Name() string { return "mean" }
func (s *meanStrategy) Init(c []ClientInfo) error {
	s.infos = slices.Clone(c)
	if s.g == nil {
		s.g = make([]float32, 2)
	}
	return nil
}
func (s *meanStrategy) State() tensor.Named {
	return tensor.Named{"g": {Shape: []int{2}, Data: slices.Clone(s.g)}}
}
func (s *meanStrategy) LoadState(st tensor.Named) error { s.g = slices.Clone(st["g"].Data); return nil }
func (s *meanStrategy) Configure(_ int, selected []int) (map[int]tensor.Named, error) {
	out := map[int]tensor.Named{}
	for _, id := range selected {
		out[id] = s.State()
	}
	return out, nil
}
func (s *meanStrategy) Aggregate(_ int, res []FitResult, fails []Failure) error {
	var ids, fids []int
	var tot float64
	sum := make([]float64, 2)
	for _, r := range res {
		ids = append(ids, r.ClientID)
		tot += float64(r.NumExamples)
		for i, v := range r.Params["g"].Data {
			sum[i] += float64(r.NumExamples) * float64(v)
		}
	}
	for _, f := range fails {
		fids = append(fids, f.ClientID)
	}
	s.results, s.failures = append(s.results, ids), append(s.failures, fids)
	for i := range s.g {
		s.g[i] = float32(sum[i] / tot)
	}
	return nil
}

// RoundMetrics implements RoundReporter: the number of results aggregated.
func (s *meanStrategy) RoundMetrics() Metrics {
	return Metrics{"results": float64(len(s.results[len(s.results)-1]))}
}

// stepClient trains by adding (id+1, 10·(id+1)) to the g it is sent (or to
// its own when sent nothing) and evaluates as its g[0]. fail makes its Fit
// fail while it returns true; n is its example count.
type stepClient struct {
	id, n int
	w     []float32
	fail  func(round int) bool
	fits  int
}

func newStep(id, n int) *stepClient { return &stepClient{id: id, n: n, w: make([]float32, 2)} }

func (c *stepClient) ID() int          { return c.id }
func (c *stepClient) NumExamples() int { return c.n }
func (c *stepClient) Fit(_ context.Context, ins FitIns) (FitRes, error) {
	c.fits++
	if c.fail != nil && c.fail(ins.Round) {
		return FitRes{}, fmt.Errorf("client %d refuses round %d", c.id, ins.Round)
	}
	if g := ins.Params["g"]; g != nil {
		copy(c.w, g.Data)
	}
	c.w[0] += float32(c.id + 1)
	c.w[1] += float32(10 * (c.id + 1))
	return FitRes{Params: tensor.Named{"g": {Shape: []int{2}, Data: slices.Clone(c.w)}}, NumExamples: c.n,
		Metrics: map[string]float64{"loss": float64(c.id)}}, nil
}
func (c *stepClient) Evaluate(context.Context, EvaluateIns) (EvaluateRes, error) {
	return EvaluateRes{Metrics: Metrics{"acc": float64(c.w[0])}}, nil
}
func (c *stepClient) State() (tensor.Named, error) {
	return tensor.Named{"w": {Shape: []int{2}, Data: slices.Clone(c.w)}}, nil
}
func (c *stepClient) LoadState(st tensor.Named) error { copy(c.w, st["w"].Data); return nil }

// stepSites wraps clients with example counts ns in sites under dir ("":
// no store), in reverse ID order (the coordinator sorts them).
func stepSites(dir string, ns ...int) ([]*stepClient, []ClientProxy) {
	var cs []*stepClient
	var ps []ClientProxy
	for id, n := range ns {
		c := newStep(id, n)
		cs = append(cs, c)
		d := ""
		if dir != "" {
			d = filepath.Join(dir, fmt.Sprint(id))
		}
		ps = append([]ClientProxy{NewSite(c, d)}, ps...)
	}
	return cs, ps
}

// fedavgOracle is the hand computation of meanStrategy over stepClients
// that all take part in every round: g ← g + Σ n_i·(i+1)/Σ n_i (and 10×
// that for g[1]).
func fedavgOracle(rounds int, ns ...int) []float32 {
	var num, den float64
	for id, n := range ns {
		num += float64(n * (id + 1))
		den += float64(n)
	}
	g := make([]float32, 2)
	for range rounds {
		g[0] = float32(float64(g[0]) + num/den)
		g[1] = float32(float64(g[1]) + 10*num/den)
	}
	return g
}

// near reports whether a and b agree within float32 rounding (1e-6
// relative).
func near(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if d := math.Abs(float64(a[i]) - float64(b[i])); d > 1e-6*math.Abs(float64(b[i])) {
			return false
		}
	}
	return true
}

// TestCoordinatorFedAvg: a full run sends each client the global part,
// aggregates what each uploaded with its example count (against the hand
// computation), gives the strategy the clients sorted by ID, reports fit
// metrics, payloads, the strategy's metrics and progress, and evaluates
// after rounds k−1, 2k−1, … and the last.
func TestCoordinatorFedAvg(t *testing.T) {
	_, proxies := stepSites("", 1, 2, 3)
	s := &meanStrategy{}
	var mu sync.Mutex
	var prog []Progress
	c := &Coordinator{Strategy: s, Proxies: proxies, Rounds: 5, Fraction: 1, EvalEvery: 2,
		Progress: func(p Progress) { mu.Lock(); prog = append(prog, p); mu.Unlock() }}
	h, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := fedavgOracle(5, 1, 2, 3); !near(s.g, want) {
		t.Fatalf("global g after 5 rounds %v, want %v", s.g, want)
	}
	if want := []ClientInfo{{0, 1}, {1, 2}, {2, 3}}; !slices.Equal(s.infos, want) {
		t.Errorf("Init got %v, want %v (sorted by ID)", s.infos, want)
	}
	var evaluated []int
	for _, r := range h.Rounds {
		if r.Eval != nil {
			evaluated = append(evaluated, r.Round)
		}
		if !slices.Equal(r.Participants, []int{0, 1, 2}) || r.Failures != nil || r.Absent != nil {
			t.Errorf("round %d: participants %v, failures %v, absent %v", r.Round, r.Participants, r.Failures, r.Absent)
		}
		// 3 clients × 2 values × 4 bytes down and up, plus nothing sent
		// for evaluation (meanStrategy is no EvaluateConfigurer)
		if r.BytesDown != 24 || r.BytesUp != 24 {
			t.Errorf("round %d: bytes down %d, up %d, want 24 and 24", r.Round, r.BytesDown, r.BytesUp)
		}
		if r.Fit[2]["loss"] != 2 || r.FitMean["loss"] != 1 || r.Strategy["results"] != 3 {
			t.Errorf("round %d: fit %v, mean %v, strategy %v", r.Round, r.Fit, r.FitMean, r.Strategy)
		}
	}
	if !slices.Equal(evaluated, []int{1, 3, 4}) {
		t.Errorf("evaluated after rounds %v, want [1 3 4] (EvalEvery 2, 5 rounds)", evaluated)
	}
	last, ok := h.LastEval()
	if !ok || last.Round != 4 {
		t.Fatalf("LastEval: round %d, %v", last.Round, ok)
	}
	// client 0 evaluates its own g[0]: the round-4 global plus its step
	if want := float64(fedavgOracle(4, 1, 2, 3)[0] + 1); math.Abs(last.Eval[0]["acc"]-want) > 1e-5*want {
		t.Errorf("client 0 evaluates %v, want %v", last.Eval[0]["acc"], want)
	}
	// fit progress: Done 1..3 of 3 in each of 5 rounds; eval 1..3 in 3
	var fitDone, evalDone []int
	for _, p := range prog {
		if p.Phase == "fit" {
			fitDone = append(fitDone, p.Done)
		} else {
			evalDone = append(evalDone, p.Done)
		}
		if p.Total != 3 || p.Rounds != 5 {
			t.Fatalf("progress %+v", p)
		}
	}
	if want := slices.Repeat([]int{1, 2, 3}, 5); !slices.Equal(fitDone, want) {
		t.Errorf("fit progress %v, want %v", fitDone, want)
	}
	if want := slices.Repeat([]int{1, 2, 3}, 3); !slices.Equal(evalDone, want) {
		t.Errorf("eval progress %v, want %v", evalDone, want)
	}
	// EvalEvery 3 over 7 rounds: after rounds 2, 5 and the last, 6
	_, proxies = stepSites("", 1, 2)
	h, err = (&Coordinator{Strategy: &meanStrategy{}, Proxies: proxies, Rounds: 7, Fraction: 1, EvalEvery: 3}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	evaluated = nil
	for _, r := range h.Rounds {
		if r.Eval != nil {
			evaluated = append(evaluated, r.Round)
		}
	}
	if !slices.Equal(evaluated, []int{2, 5, 6}) {
		t.Errorf("evaluated after rounds %v, want [2 5 6] (EvalEvery 3, 7 rounds)", evaluated)
	}
	// NoEvaluate: no round is evaluated
	_, proxies = stepSites("", 1, 2, 3)
	h, err = (&Coordinator{Strategy: &meanStrategy{}, Proxies: proxies, Rounds: 2, Fraction: 1, NoEvaluate: true}).Run(context.Background())
	if err != nil || h.Rounds[0].Eval != nil || h.Rounds[1].Eval != nil {
		t.Fatalf("NoEvaluate: %v, evaluations %v %v", err, h.Rounds[0].Eval, h.Rounds[1].Eval)
	}
	if _, ok := h.LastEval(); ok {
		t.Error("LastEval found an evaluation in a run without any")
	}
}

// TestCoordinatorSetup: a run without strategy or clients, with a negative
// round count, a fraction outside (0, 1], or two clients of one ID is
// refused; zero rounds is an empty run.
func TestCoordinatorSetup(t *testing.T) {
	_, proxies := stepSites("", 1, 1)
	dup := []ClientProxy{proxies[0], proxies[0]}
	cases := []struct {
		name string
		c    Coordinator
		want string
	}{
		{"no strategy", Coordinator{Proxies: proxies, Fraction: 1}, "no strategy"},
		{"no clients", Coordinator{Strategy: &meanStrategy{}, Fraction: 1}, "no clients"},
		{"negative rounds", Coordinator{Strategy: &meanStrategy{}, Proxies: proxies, Rounds: -1, Fraction: 1}, "rounds -1"},
		{"fraction 0", Coordinator{Strategy: &meanStrategy{}, Proxies: proxies, Rounds: 1}, "fraction 0 in (0, 1]"},
		{"fraction 1.5", Coordinator{Strategy: &meanStrategy{}, Proxies: proxies, Rounds: 1, Fraction: 1.5}, "fraction 1.5"},
		{"duplicate", Coordinator{Strategy: &meanStrategy{}, Proxies: dup, Rounds: 1, Fraction: 1}, "two clients with ID 1"},
	}
	for _, tc := range cases {
		if _, err := tc.c.Run(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	h, err := (&Coordinator{Strategy: &meanStrategy{}, Proxies: proxies, Rounds: 0, Fraction: 1}).Run(context.Background())
	if err != nil || len(h.Rounds) != 0 {
		t.Fatalf("0 rounds: %v, %d rounds", err, len(h.Rounds))
	}
}

// TestResumeEqualsRun: a run stopped after round 1 (OnRound's error) and
// resumed by a fresh coordinator, strategy and clients on the same folders
// ends bit-identical to an uninterrupted run, sampling the same clients
// (fraction 0.5 of 4); Resume refuses a checkpoint of another strategy,
// other clients, or a history that does not match its next round.
func TestResumeEqualsRun(t *testing.T) {
	ctx := context.Background()
	run := func(dir string, stopAfter int) (*meanStrategy, *History, error) {
		_, proxies := stepSites(dir, 1, 2, 3, 4)
		s := &meanStrategy{}
		c := &Coordinator{Strategy: s, Proxies: proxies, Rounds: 5, Fraction: 0.5, Seed: 9, Store: FileStore{Path: filepath.Join(dir, "ckpt")},
			OnRound: func(rep RoundReport) error {
				if rep.Round == stopAfter {
					return errors.New("stop")
				}
				return nil
			}}
		h, err := c.Run(ctx)
		return s, h, err
	}
	want, wantH, err := run(t.TempDir(), -1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, _, err := run(dir, 1); err == nil || !strings.Contains(err.Error(), "stop") {
		t.Fatalf("stopped run: %v", err)
	}
	_, proxies := stepSites(dir, 1, 2, 3, 4)
	s := &meanStrategy{}
	c := &Coordinator{Strategy: s, Proxies: proxies, Rounds: 5, Fraction: 0.5, Seed: 9, Store: FileStore{Path: filepath.Join(dir, "ckpt")}}
	var logs bytes.Buffer
	c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	h, err := c.Resume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "different sampler settings") {
		t.Errorf("resuming with the same seed and fraction warned: %s", logs.String())
	}
	if !slices.Equal(s.g, want.g) || len(h.Rounds) != 5 {
		t.Fatalf("resumed g %v (%d rounds), uninterrupted %v", s.g, len(h.Rounds), want.g)
	}
	for r := range 5 {
		if !slices.Equal(h.Rounds[r].Selected, wantH.Rounds[r].Selected) || len(wantH.Rounds[r].Selected) != map[bool]int{true: 4, false: 2}[r == 0] {
			t.Errorf("round %d: resumed selected %v, uninterrupted %v", r, h.Rounds[r].Selected, wantH.Rounds[r].Selected)
		}
	}
	if !slices.Equal(s.results[0], wantH.Rounds[2].Selected) {
		t.Errorf("first resumed round aggregated %v, want round 2's %v", s.results[0], wantH.Rounds[2].Selected)
	}

	store := FileStore{Path: filepath.Join(dir, "ckpt")}
	ck, err := store.Load()
	if err != nil {
		t.Fatal(err)
	}
	bad := func(name string, edit func(*Checkpoint), c *Coordinator, want string) {
		t.Helper()
		p := filepath.Join(t.TempDir(), "ckpt")
		k := *ck
		edit(&k)
		if err := WriteCheckpoint(p, &k); err != nil {
			t.Fatal(err)
		}
		c.Store = FileStore{Path: p}
		if _, err := c.Resume(ctx); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, want)
		}
	}
	fresh := func(ns ...int) *Coordinator {
		_, proxies := stepSites("", ns...)
		return &Coordinator{Strategy: &meanStrategy{}, Proxies: proxies, Rounds: 5, Fraction: 0.5, Seed: 9}
	}
	bad("strategy", func(k *Checkpoint) { k.Strategy = "other" }, fresh(1, 2, 3, 4), `checkpoint of strategy "other", running "mean"`)
	bad("clients", func(k *Checkpoint) {}, fresh(1, 2, 3), "checkpoint has clients [0 1 2 3], run has [0 1 2]")
	bad("history", func(k *Checkpoint) { k.NextRound = 3 }, fresh(1, 2, 3, 4), "history holds 5 rounds, next round is 3")
	bad("sampler", func(k *Checkpoint) { k.Sampler = []byte{1} }, fresh(1, 2, 3, 4), "sampler state")
	for _, edit := range []func(*Coordinator){func(c *Coordinator) { c.Seed = 10 }, func(c *Coordinator) { c.Fraction = 0.75 }} {
		c := fresh(1, 2, 3, 4)
		edit(c)
		c.Store = store
		logs.Reset()
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		if _, err := c.Resume(ctx); err != nil || !strings.Contains(logs.String(), "resuming with different sampler settings") {
			t.Errorf("seed %d fraction %g: %v; the warning is missing: %s", c.Seed, c.Fraction, err, logs.String())
		}
	}
	if _, err := fresh(1, 2).Resume(ctx); err == nil || !strings.Contains(err.Error(), "no checkpoint store") {
		t.Errorf("resume without a store: %v", err)
	}
	c = fresh(1, 2)
	c.Store = FileStore{Path: filepath.Join(t.TempDir(), "none")}
	if _, err := c.Resume(ctx); !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("resume without a checkpoint: %v", err)
	}
	c = fresh(1, 2)
	c.Strategy = nil
	c.Store = store
	if _, err := c.Resume(ctx); err == nil || !strings.Contains(err.Error(), "no strategy") {
		t.Errorf("resume without a strategy: %v", err)
	}
}

// TestFailuresAndMinFit: with TolerateFailures a failing client is a
// Failure handed to the strategy, absent, and not counted in the payloads;
// a round with fewer answers than MinFit stops the run naming the missing
// client, or, with RetryEvery, runs again once the client answers;
// without TolerateFailures the first error stops the run.
func TestFailuresAndMinFit(t *testing.T) {
	ctx := context.Background()
	cs, proxies := stepSites("", 1, 2, 3)
	cs[1].fail = func(r int) bool { return r == 1 }
	s := &meanStrategy{}
	h, err := (&Coordinator{Strategy: s, Proxies: proxies, Rounds: 2, Fraction: 1, TolerateFailures: true, MinFit: 2}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r1 := h.Rounds[1]
	if !slices.Equal(s.failures[1], []int{1}) || !slices.Equal(s.results[1], []int{0, 2}) || !slices.Equal(r1.Absent, []int{1}) ||
		!slices.Equal(r1.Participants, []int{0, 2}) || !strings.Contains(r1.Failures[1], "client 1 refuses round 1") {
		t.Fatalf("round 1: strategy results %v failures %v; report absent %v participants %v failures %v",
			s.results[1], s.failures[1], r1.Absent, r1.Participants, r1.Failures)
	}
	if r1.BytesUp != 16 || r1.BytesDown != 16 {
		t.Errorf("round 1: bytes up %d, down %d; want 16 and 16 (the two that answered)", r1.BytesUp, r1.BytesDown)
	}
	if len(s.failures[0]) != 0 || h.Rounds[0].Failures != nil {
		t.Errorf("round 0 has failures %v / %v", s.failures[0], h.Rounds[0].Failures)
	}
	// MinFit 3: round 1 stops the run naming the client
	cs, proxies = stepSites("", 1, 2, 3)
	cs[1].fail = func(r int) bool { return r == 1 }
	h, err = (&Coordinator{Strategy: &meanStrategy{}, Proxies: proxies, Rounds: 2, Fraction: 1, TolerateFailures: true, MinFit: 3}).Run(ctx)
	if !errors.Is(err, errBelowMinFit) || !strings.Contains(err.Error(), "2 of 3 selected clients answered, 3 needed (missing [1])") || len(h.Rounds) != 1 {
		t.Fatalf("MinFit 3: %v after %d rounds", err, len(h.Rounds))
	}
	// ... and with RetryEvery it is retried until client 1 answers
	cs, proxies = stepSites("", 1, 2, 3)
	cs[1].fail = func(r int) bool { return r == 1 && cs[1].fits < 3 }
	s = &meanStrategy{}
	_, err = (&Coordinator{Strategy: s, Proxies: proxies, Rounds: 2, Fraction: 1, TolerateFailures: true, MinFit: 3,
		RetryEvery: time.Millisecond}).Run(ctx)
	if err != nil || cs[1].fits != 3 || len(s.results) != 2 {
		t.Fatalf("retried: %v, client 1 asked %d times, %d aggregations", err, cs[1].fits, len(s.results))
	}
	if want := fedavgOracle(2, 1, 2, 3); !near(s.g, want) {
		t.Errorf("after the retried round g = %v, want %v", s.g, want)
	}
	// without TolerateFailures
	cs, proxies = stepSites("", 1, 2, 3)
	cs[2].fail = func(int) bool { return true }
	if _, err := (&Coordinator{Strategy: &meanStrategy{}, Proxies: proxies, Rounds: 1, Fraction: 1}).Run(ctx); err == nil ||
		!strings.Contains(err.Error(), "client 2 fit: client 2 refuses round 0") {
		t.Fatalf("intolerant: %v", err)
	}
}

// TestAvailability: a client Available reports unreachable is not asked,
// and fails with Unavailable's reason (or as offline); a retried round
// waits until enough of the selected clients are available.
func TestAvailability(t *testing.T) {
	ctx := context.Background()
	cs, proxies := stepSites("", 1, 2, 3)
	var mu sync.Mutex
	up := map[int]bool{0: true, 1: false, 2: false}
	avail := func(id int) bool { mu.Lock(); defer mu.Unlock(); return up[id] }
	h, err := (&Coordinator{Strategy: &meanStrategy{}, Proxies: proxies, Rounds: 1, Fraction: 1, TolerateFailures: true, Available: avail,
		Unavailable: func(id int) string {
			if id == 1 {
				return "revoked"
			}
			return ""
		}}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := h.Rounds[0].Failures
	if cs[1].fits != 0 || cs[2].fits != 0 || f[1] != "revoked: not asked" || f[2] != errOffline.Error() {
		t.Fatalf("fits %d %d, failures %v", cs[1].fits, cs[2].fits, f)
	}
	if _, ok := h.Rounds[0].Eval[1]; ok || !slices.Equal(h.Rounds[0].Absent, []int{1, 2}) {
		t.Errorf("unavailable clients evaluated: eval %v, absent %v", h.Rounds[0].Eval, h.Rounds[0].Absent)
	}
	// MinFit 2 with RetryEvery: the round waits until client 2 is back
	cs, proxies = stepSites("", 1, 2, 3)
	up = map[int]bool{0: true, 1: false, 2: false}
	var logs bytes.Buffer
	go func() {
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		up[2] = true
		mu.Unlock()
	}()
	s := &meanStrategy{}
	_, err = (&Coordinator{Strategy: s, Proxies: proxies, Rounds: 1, Fraction: 1, TolerateFailures: true, MinFit: 2, Available: avail,
		RetryEvery: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))}).Run(ctx)
	if err != nil || cs[2].fits != 1 || !slices.Equal(s.results[0], []int{0, 2}) {
		t.Fatalf("retry: %v, client 2 asked %d times, aggregated %v", err, cs[2].fits, s.results)
	}
	// the wait logs every RetryEvery, not before: a 50 ms wait with
	// RetryEvery 10 s logs no "still waiting" line
	_, proxies = stepSites("", 1, 2, 3)
	mu.Lock()
	up = map[int]bool{0: true, 1: false, 2: false}
	mu.Unlock()
	var quiet bytes.Buffer
	go func() {
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		up[2] = true
		mu.Unlock()
	}()
	if _, err := (&Coordinator{Strategy: &meanStrategy{}, Proxies: proxies, Rounds: 1, Fraction: 1, TolerateFailures: true, MinFit: 2, Available: avail,
		RetryEvery: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(&quiet, nil))}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(quiet.String(), "still waiting") {
		t.Errorf("a wait shorter than RetryEvery logged: %s", quiet.String())
	}
	if cs[0].fits != 2 {
		t.Errorf("client 0 asked %d times, want 2 (the round, then once more after the wait)", cs[0].fits)
	}
	if !strings.Contains(logs.String(), `msg="still waiting for clients to reach --min-fit" round=0 need=2 available=1`) {
		t.Errorf("the wait logged nothing: %s", logs.String())
	}
}

// TestLastDepartedClient: a round in which every selected client left the
// schedule stops the run; one client left and one answering (MinFit 1)
// runs; the leaving and the return are each logged once.
func TestLastDepartedClient(t *testing.T) {
	ctx := context.Background()
	_, proxies := stepSites("", 1, 2)
	round := 0
	var logs bytes.Buffer
	s := &meanStrategy{}
	h, err := (&Coordinator{Strategy: s, Proxies: proxies, Rounds: 4, Fraction: 1, TolerateFailures: true,
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
		OnRound: func(rep RoundReport) error { round = rep.Round + 1; return nil },
		Departed: func(id int) string {
			if id == 1 && round >= 1 && round <= 2 {
				return "revoked"
			}
			return ""
		}}).Run(ctx)
	if err != nil || len(h.Rounds) != 4 || !slices.Equal(s.results[1], []int{0}) {
		t.Fatalf("one of two departed: %v, %d rounds, results %v", err, len(h.Rounds), s.results)
	}
	if n := strings.Count(logs.String(), "client left the schedule"); n != 1 {
		t.Errorf("leaving logged %d times, want 1:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "client back in the schedule"); n != 1 {
		t.Errorf("return logged %d times, want 1:\n%s", n, logs.String())
	}
	_, proxies = stepSites("", 1, 2)
	_, err = (&Coordinator{Strategy: &meanStrategy{}, Proxies: proxies, Rounds: 1, Fraction: 1, TolerateFailures: true,
		Departed: func(int) string { return "revoked" }}).Run(ctx)
	if !errors.Is(err, errBelowMinFit) || !strings.Contains(err.Error(), "0 of 2 selected clients answered, 1 needed (left the schedule: [0 1])") {
		t.Fatalf("every client departed: %v", err)
	}
}

// ctxClient cancels the run during its Fit and ignores the cancellation.
type ctxClient struct {
	stepClient
	cancel context.CancelFunc
}

func (c *ctxClient) Fit(ctx context.Context, ins FitIns) (FitRes, error) {
	c.cancel()
	return c.stepClient.Fit(ctx, ins)
}

// TestSequentialStopsOnCancel: with Parallel 1 (one client at a time) a
// cancelled run asks no further client, and returns the context's error.
func TestSequentialStopsOnCancel(t *testing.T) {
	for _, par := range []int{0, 1} {
		ctx, cancel := context.WithCancel(context.Background())
		c0 := &ctxClient{stepClient: *newStep(0, 1), cancel: cancel}
		c1 := newStep(1, 1)
		_, err := (&Coordinator{Strategy: &meanStrategy{}, Proxies: []ClientProxy{NewSite(c0, ""), NewSite(c1, "")}, Rounds: 1, Fraction: 1,
			Parallel: par}).Run(ctx)
		if !errors.Is(err, context.Canceled) || c1.fits != 0 {
			t.Errorf("parallel %d: %v; client 1 asked %d times after the cancellation", par, err, c1.fits)
		}
	}
}

// TestSimulatedSecure: secure aggregation in one process hands the
// strategy one result, the quantised weighted mean (Quantizer.Aggregate's,
// within its bound of FedAvg's), counts the masked uploads' size, and is
// refused when a round would take a single client.
func TestSimulatedSecure(t *testing.T) {
	ctx := context.Background()
	_, proxies := stepSites("", 1, 2, 3)
	s := &meanStrategy{}
	sec := &SimulatedSecure{}
	sec.Quant.Clip, sec.Quant.ScaleBits = 256, 24
	h, err := (&Coordinator{Strategy: s, Proxies: proxies, Rounds: 1, Fraction: 1, Secure: sec}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.results[0], []int{0}) {
		t.Fatalf("the strategy received results %v, want the one combined result (first client's ID)", s.results[0])
	}
	if want := fedavgOracle(1, 1, 2, 3); !near(s.g, want) { // 14/6 and 140/6
		t.Fatalf("secure mean %v, FedAvg %v", s.g, want)
	}
	mean, err := sec.Quant.Aggregate([][]float32{{1, 10}, {2, 20}, {3, 30}}, []uint64{1, 2, 3})
	if err != nil || s.g[0] != float32(mean[0]) || s.g[1] != float32(mean[1]) {
		t.Fatalf("secure mean %v, Quantizer.Aggregate %v (%v)", s.g, mean, err)
	}
	if r := h.Rounds[0]; r.BytesUp != 3*MaskedBytes(2) || MaskedBytes(2) != 24 {
		t.Errorf("bytes up %d, want 3 masked inputs of 3 words", r.BytesUp)
	}
	// a uniform mean, and a total weight of the example counts
	res, err := (&SimulatedSecure{Quant: sec.Quant, Uniform: true}).Combine(ctx, 0, []FitResult{
		{ClientID: 4, NumExamples: 1, Params: tensor.Named{"a": {Shape: []int{1}, Data: []float32{1}}}},
		{ClientID: 5, NumExamples: 3, Params: tensor.Named{"a": {Shape: []int{1}, Data: []float32{2}}}}})
	if err != nil || res.ClientID != 4 || res.NumExamples != 4 || res.Params["a"].Data[0] != 1.5 {
		t.Fatalf("uniform: %+v, %v", res, err)
	}
	// refusals
	if _, err := sec.Combine(ctx, 3, nil); err == nil || !strings.Contains(err.Error(), "round 3: no results") {
		t.Errorf("no results: %v", err)
	}
	two := []FitResult{{ClientID: 1, NumExamples: 1, Params: tensor.Named{"a": tensor.New(1)}}, {ClientID: 2, NumExamples: 1, Params: tensor.Named{"b": tensor.New(1)}}}
	if _, err := sec.Combine(ctx, 0, two); err == nil || !strings.Contains(err.Error(), "client 2 uploaded tensors [b], client 1 [a]") {
		t.Errorf("different layouts: %v", err)
	}
	two[1].Params, two[1].NumExamples = tensor.Named{"a": tensor.New(1)}, 0
	if _, err := sec.Combine(ctx, 0, two); err == nil || !strings.Contains(err.Error(), "client 2: secure aggregation: an update of 0 examples has no weight") {
		t.Errorf("zero examples: %v", err)
	}
	empty, err := sec.Combine(ctx, 0, []FitResult{{ClientID: 7, NumExamples: 2, Params: tensor.Named{}}, {ClientID: 8, NumExamples: 3, Params: tensor.Named{}}})
	if err != nil || empty.ClientID != 7 || empty.NumExamples != 5 || len(empty.Params) != 0 {
		t.Errorf("empty uploads: %+v, %v", empty, err)
	}
	for _, n := range []int{1, 0} {
		if w, err := SecureWeight(n, true); w != 1 || err != nil {
			t.Errorf("uniform weight of %d examples: %d, %v", n, w, err)
		}
	}
	if w, err := SecureWeight(1, false); w != 1 || err != nil {
		t.Errorf("weight of 1 example: %d, %v", w, err)
	}
	_, proxies = stepSites("", 1, 2, 3)
	if _, err := (&Coordinator{Strategy: &meanStrategy{}, Proxies: proxies, Rounds: 1, Fraction: 0.5, Secure: sec}).Run(ctx); err == nil ||
		!strings.Contains(err.Error(), "3 clients at fraction 0.5 give 1") {
		t.Errorf("one client a round: %v", err)
	}
	// a single client without secure aggregation is fine
	_, proxies = stepSites("", 1)
	if _, err := (&Coordinator{Strategy: &meanStrategy{}, Proxies: proxies, Rounds: 1, Fraction: 1}).Run(ctx); err != nil {
		t.Errorf("one client without secure aggregation: %v", err)
	}
}

// secureBegin is a SecureAggregator whose Begin adds a setting (or fails).
type secureBegin struct {
	SimulatedSecure
	extra map[string]string
	err   error
}

func (s *secureBegin) Begin(int, []int) (map[string]string, error) { return s.extra, s.err }

// cfgClient records the Config of each FitIns.
type cfgClient struct {
	stepClient
	cfgs []map[string]string
}

func (c *cfgClient) Fit(ctx context.Context, ins FitIns) (FitRes, error) {
	c.cfgs = append(c.cfgs, ins.Config)
	return c.stepClient.Fit(ctx, ins)
}

// TestSecureBegin: the secure aggregator's settings join FitConfig's in
// every FitIns; its error stops the round.
func TestSecureBegin(t *testing.T) {
	ctx := context.Background()
	c0, c1 := &cfgClient{stepClient: *newStep(0, 1)}, &cfgClient{stepClient: *newStep(1, 1)}
	sec := &secureBegin{extra: map[string]string{"secagg": "on"}}
	sec.Quant.Clip, sec.Quant.ScaleBits = 256, 24
	co := &Coordinator{Strategy: &meanStrategy{}, Proxies: []ClientProxy{NewSite(c0, ""), NewSite(c1, "")}, Rounds: 1, Fraction: 1, Secure: sec,
		FitConfig: func(r int) map[string]string { return map[string]string{"lr": fmt.Sprint(r)} }}
	if _, err := co.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(c1.cfgs); got != "[map[lr:0 secagg:on]]" {
		t.Errorf("fit config %s, want both settings", got)
	}
	sec.extra = nil
	c1.cfgs = nil
	if _, err := co.Run(ctx); err != nil || fmt.Sprint(c1.cfgs) != "[map[lr:0]]" {
		t.Errorf("nothing to add: %v, config %v", err, c1.cfgs)
	}
	co.FitConfig, sec.extra = nil, map[string]string{"secagg": "on"}
	c1.cfgs = nil
	if _, err := co.Run(ctx); err != nil || fmt.Sprint(c1.cfgs) != "[map[secagg:on]]" {
		t.Errorf("no FitConfig: %v, config %v", err, c1.cfgs)
	}
	sec.err = errors.New("no session")
	if _, err := co.Run(ctx); err == nil || !strings.Contains(err.Error(), "secure aggregation: no session") {
		t.Errorf("Begin failing: %v", err)
	}
}

// slowClient answers after its delay, ignoring the context.
type slowClient struct {
	stepClient
	delay time.Duration
}

func (c *slowClient) Fit(ctx context.Context, ins FitIns) (FitRes, error) {
	time.Sleep(c.delay)
	return c.stepClient.Fit(ctx, ins)
}

// TestRoundTimeoutSequential: one client at a time, a round whose fit
// phase outlasts RoundTimeout makes the clients not yet asked late
// failures, never participants.
func TestRoundTimeoutSequential(t *testing.T) {
	c0 := &slowClient{stepClient: *newStep(0, 1), delay: 200 * time.Millisecond}
	c1 := newStep(1, 1)
	s := &meanStrategy{}
	h, err := (&Coordinator{Strategy: s, Proxies: []ClientProxy{NewSite(c0, ""), NewSite(c1, "")}, Rounds: 1, Fraction: 1, NoEvaluate: true,
		TolerateFailures: true, RoundTimeout: 50 * time.Millisecond}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := h.Rounds[0]
	if c1.fits != 0 || !slices.Equal(r.Participants, []int{0}) || !strings.Contains(r.Failures[1], "deadline exceeded") {
		t.Fatalf("client 1 asked %d times; participants %v, failures %v", c1.fits, r.Participants, r.Failures)
	}
}

// TestMinFitAboveSampledRefused: a MinFit above the clients a round
// samples is refused at setup (a sampled round that lost a client would
// otherwise wait for more answers than it asked for); at the sampled
// count it runs.
func TestMinFitAboveSampledRefused(t *testing.T) {
	_, proxies := stepSites("", 1, 2, 3, 4)
	_, err := (&Coordinator{Strategy: &meanStrategy{}, Proxies: proxies, Rounds: 1, Fraction: 0.5, TolerateFailures: true, MinFit: 3}).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "--min-fit 3 is more than the 2 clients a round samples") {
		t.Fatalf("MinFit 3 of 2 sampled: %v", err)
	}
	if _, err := (&Coordinator{Strategy: &meanStrategy{}, Proxies: proxies, Rounds: 1, Fraction: 0.5, TolerateFailures: true, MinFit: 2}).Run(context.Background()); err != nil {
		t.Fatalf("MinFit 2 of 2 sampled: %v", err)
	}
}
