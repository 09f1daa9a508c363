package federation

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/tensor"
)

// TestSampler: round 0 and a fraction of 1 take every client; otherwise
// max(1, ⌊fraction·n⌋) distinct clients in ascending order, every client
// drawn over many rounds; a round that takes every client draws no random
// numbers; a marshalled sampler continues exactly.
func TestSampler(t *testing.T) {
	ids := []int{12, 3, 7, 9, 5}
	for _, tc := range []struct {
		f    float64
		n, m int
	}{{1, 5, 5}, {0.5, 5, 2}, {0.99, 3, 2}, {0.1, 5, 1}, {0.2, 5, 1}, {0.4, 5, 2}, {0.5, 0, 0}} {
		if got := NewSampler(tc.f, 1).Count(tc.n); got != tc.m {
			t.Errorf("Count(%d) at fraction %g = %d, want %d", tc.n, tc.f, got, tc.m)
		}
	}
	s := NewSampler(0.4, 3)
	if got := s.Sample(0, ids); !slices.Equal(got, []int{3, 5, 7, 9, 12}) {
		t.Fatalf("round 0: %v, want every client sorted", got)
	}
	seen := map[int]int{}
	for r := 1; r <= 200; r++ {
		got := s.Sample(r, ids)
		if len(got) != 2 || got[0] >= got[1] || !slices.Contains(ids, got[0]) || !slices.Contains(ids, got[1]) {
			t.Fatalf("round %d: %v, want 2 distinct clients of %v, ascending", r, got, ids)
		}
		for _, id := range got {
			seen[id]++
		}
	}
	for _, id := range ids {
		// 400 draws over 5 clients: 80 each expected
		if seen[id] < 40 || seen[id] > 120 {
			t.Errorf("client %d drawn %d times in 200 rounds of 2 of 5", id, seen[id])
		}
	}
	// a round of a single client (m = n = 1) draws nothing
	a, b := NewSampler(0.5, 11), NewSampler(0.5, 11)
	if got := a.Sample(1, []int{4}); !slices.Equal(got, []int{4}) {
		t.Fatalf("one client: %v", got)
	}
	if x, y := a.Sample(2, ids), b.Sample(2, ids); !slices.Equal(x, y) {
		t.Errorf("a round taking every client drew random numbers: next round %v, want %v", x, y)
	}
	// marshal and continue
	st, err := a.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var c Sampler
	c.Fraction = 0.5
	if err := c.UnmarshalBinary(st); err != nil {
		t.Fatal(err)
	}
	for r := 3; r < 8; r++ {
		if x, y := a.Sample(r, ids), c.Sample(r, ids); !slices.Equal(x, y) {
			t.Fatalf("round %d: restored sampler drew %v, original %v", r, y, x)
		}
	}
	if err := c.UnmarshalBinary([]byte("junk")); err == nil || !strings.Contains(err.Error(), "sampler state") {
		t.Errorf("junk state: %v", err)
	}
}

// TestSiteReplaysRounds: a site asked again for a round it already trained
// (the coordinator resumed from an earlier checkpoint) starts from its
// state before that round, so that it uploads the same; the store keeps the
// two newest states; a fresh site on the folder evaluates the state after
// the round it is asked about; an evaluation without tensors saves nothing.
func TestSiteReplaysRounds(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := newStep(0, 4)
	s := NewSite(c, dir)
	var first []FitRes
	for r := range 3 {
		res, err := s.Fit(ctx, FitIns{Round: r})
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, res)
	}
	// the client trained from its own state: w = (r+1)·(1, 10)
	if got := first[2].Params["g"].Data; got[0] != 3 || got[1] != 30 {
		t.Fatalf("round 2 uploaded %v, want [3 30]", got)
	}
	for _, r := range []int{2, 2} {
		res, err := s.Fit(ctx, FitIns{Round: r})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Params["g"].Data, first[r].Params["g"].Data) {
			t.Fatalf("round %d replayed uploads %v, first %v", r, res.Params["g"].Data, first[r].Params["g"].Data)
		}
	}
	if rs, err := s.Store.rounds(); err != nil || !slices.Equal(rs, []int{1, 2}) {
		t.Fatalf("stored rounds %v (%v), want the two newest [1 2]", rs, err)
	}
	// a fresh site evaluates the state after round 1 (w = 2, 20)
	fresh := newStep(0, 4)
	res, err := NewSite(fresh, dir).Evaluate(ctx, EvaluateIns{Round: 1})
	if err != nil || res.Metrics["acc"] != 2 {
		t.Fatalf("evaluation after round 1: %v, %v; want acc 2", res.Metrics, err)
	}
	before, _ := s.Store.rounds()
	if _, err := s.Evaluate(ctx, EvaluateIns{Round: 7}); err != nil {
		t.Fatal(err)
	}
	if after, _ := s.Store.rounds(); !slices.Equal(before, after) {
		t.Errorf("an evaluation without tensors saved state: rounds %v, then %v", before, after)
	}
	// the example count: the client's when Fit reports none, else Fit's
	c.n = 9
	if res, err := NewSite(&zeroN{c}, "").Fit(ctx, FitIns{}); err != nil || res.NumExamples != 9 {
		t.Errorf("a fit reporting 0 examples: %d (%v), want the client's 9", res.NumExamples, err)
	}
	if res, err := NewSite(&fixedN{stepClient: c, n: 3}, "").Fit(ctx, FitIns{}); err != nil || res.NumExamples != 3 {
		t.Errorf("a fit reporting 3 examples: %d (%v)", res.NumExamples, err)
	}
}

// zeroN reports no example count from Fit.
type zeroN struct{ *stepClient }

func (z *zeroN) Fit(ctx context.Context, ins FitIns) (FitRes, error) {
	r, err := z.stepClient.Fit(ctx, ins)
	r.NumExamples = 0
	return r, err
}

// fixedN reports n examples from Fit (not NumExamples()).
type fixedN struct {
	*stepClient
	n int
}

func (f *fixedN) Fit(ctx context.Context, ins FitIns) (FitRes, error) {
	r, err := f.stepClient.Fit(ctx, ins)
	r.NumExamples = f.n
	return r, err
}

// TestSiteStoreKeepsTwo: saving after rounds 0..4 keeps rounds 3 and 4;
// Latest(before) is the newest saved before it.
func TestSiteStoreKeepsTwo(t *testing.T) {
	st := SiteStore{Dir: t.TempDir()}
	for r := range 5 {
		if err := st.Save(r, tensor.Named{"w": {Shape: []int{1}, Data: []float32{float32(r)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if rs, err := st.rounds(); err != nil || !slices.Equal(rs, []int{3, 4}) {
		t.Fatalf("kept rounds %v (%v), want [3 4]", rs, err)
	}
	for before, want := range map[int]int{5: 4, 4: 3} {
		got, r, ok, err := st.Latest(before)
		if err != nil || !ok || r != want || got["w"].Data[0] != float32(want) {
			t.Errorf("Latest(%d) = round %d %v (%v, %v), want %d", before, r, got, ok, err, want)
		}
	}
	if _, _, ok, err := st.Latest(3); ok || err != nil {
		t.Errorf("Latest(3) found a state (%v)", err)
	}
}

// TestSiteRestoreReportsDamage: Restore of a folder whose newest state is
// damaged fails, naming the file.
func TestSiteRestoreReportsDamage(t *testing.T) {
	dir := t.TempDir()
	s := NewSite(newStep(0, 1), dir)
	if _, err := s.Fit(context.Background(), FitIns{Round: 0}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "round-000000.safetensors")
	if err := os.WriteFile(p, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := NewSite(newStep(0, 1), dir).Restore(); err == nil || !strings.Contains(err.Error(), "round-000000.safetensors") {
		t.Fatalf("restore of a damaged state: %v", err)
	}
}

// failInstall installs half of what it is sent, then fails.
type failInstall struct{ evalInstall }

func (f *failInstall) Evaluate(_ context.Context, ins EvaluateIns) (EvaluateRes, error) {
	if t := ins.Params["w"]; t != nil {
		f.w[0] = t.Data[0]
	}
	return EvaluateRes{}, errors.New("disk full")
}

// TestSiteFailedInstallReloads: an evaluation that installs part of its
// tensors and fails leaves the site to reload its saved state before its
// next round, alone or in a group.
func TestSiteFailedInstallReloads(t *testing.T) {
	ctx := context.Background()
	for _, group := range []bool{false, true} {
		c := &failInstall{evalInstall{w: make([]float32, 2)}}
		s := NewSite(c, t.TempDir())
		if _, err := s.Fit(ctx, FitIns{Round: 0}); err != nil { // w = [1 1]
			t.Fatal(err)
		}
		ins := EvaluateIns{Round: 0, Params: tensor.Named{"w": {Shape: []int{2}, Data: []float32{50, 60}}}}
		var err error
		if group {
			_, errs := EvaluateSites(ctx, &recordingGroup{fail: -1}, []*Site{s}, []EvaluateIns{ins})
			err = errs[0]
		} else {
			_, err = s.Evaluate(ctx, ins)
		}
		if err == nil {
			t.Fatal("the failing evaluation succeeded")
		}
		res, err := s.Fit(ctx, FitIns{Round: 1})
		if err != nil || res.Params["w"].Data[0] != 2 {
			t.Errorf("group %v: round 1 trained from the partial install: %v (%v), want [2 2]", group, res.Params["w"].Data, err)
		}
	}
}

// TestGroupEvaluatedStateReplays: a site whose group evaluation after
// round 1 installed tensors (it trained in round 0 only) and which is then
// asked to train round 1 again (a resumed coordinator) starts from its
// state after round 0, not from what it evaluated; a fresh site evaluated
// in a group scores the state after the round it is asked about.
func TestGroupEvaluatedStateReplays(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := &evalInstall{w: make([]float32, 2)}
	s := NewSite(c, dir)
	if _, err := s.Fit(ctx, FitIns{Round: 0}); err != nil { // [1 1]
		t.Fatal(err)
	}
	ins := EvaluateIns{Round: 1, Params: tensor.Named{"w": {Shape: []int{2}, Data: []float32{7, 8}}}}
	if _, errs := EvaluateSites(ctx, &recordingGroup{fail: -1}, []*Site{s}, []EvaluateIns{ins}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	res, err := s.Fit(ctx, FitIns{Round: 1})
	if err != nil || res.Params["w"].Data[0] != 2 {
		t.Fatalf("round 1 replayed from %v (%v), want [2 2] (the state after round 0)", res.Params["w"].Data, err)
	}
	fresh := NewSite(&evalInstall{w: make([]float32, 2)}, dir)
	out, errs := EvaluateSites(ctx, &recordingGroup{fail: -1}, []*Site{fresh}, []EvaluateIns{{Round: 1}})
	if errs[0] != nil || out[0].Metrics["w0"] != 2 {
		t.Fatalf("fresh site evaluated after round 1: %v (%v), want w0 2", out[0].Metrics, errs[0])
	}
}

// TestGroupEvaluationParallelOne: Parallel 1 (one client at a time) still
// evaluates a group together; eval progress counts only the clients that
// evaluated.
func TestGroupEvaluationParallelOne(t *testing.T) {
	g := &recordingGroup{fail: 1}
	c := groupFederation(t.TempDir(), g, false)
	c.Parallel = 1
	var done []int
	c.Progress = func(p Progress) {
		if p.Phase == "eval" {
			done = append(done, p.ClientID)
		}
	}
	if _, err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(g.calls) != 2 {
		t.Fatalf("Parallel 1: group called %v", g.calls)
	}
	if want := []int{0, 3, 2, 0, 3, 2}; !slices.Equal(done, want) {
		t.Errorf("eval progress for clients %v, want %v (client 1 failed)", done, want)
	}
}

// TestCheckpointBoundaries: a checkpoint without tensors (index right
// after the magic) reads back; a tensor entry claiming data that runs into
// the index is refused as out of place; shapes up to 2^40 values are valid.
func TestCheckpointBoundaries(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "empty.ckpt")
	ck := sampleCheckpoint()
	ck.StrategyState = tensor.Named{}
	if err := WriteCheckpoint(p, ck); err != nil {
		t.Fatal(err)
	}
	got, err := ReadCheckpoint(p)
	if err != nil || len(got.StrategyState) != 0 || got.NextRound != 2 {
		t.Fatalf("checkpoint without tensors: %v", err)
	}
	// one tensor of 2 values whose index says 3
	ck.StrategyState = tensor.Named{"w": {Shape: []int{2}, Data: []float32{1, 2}}}
	var buf bytes.Buffer
	if err := writeCheckpoint(&buf, ck); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	off := binary64(b[len(b)-trailerSize:])
	var idx checkpointIndex
	if err := json.Unmarshal(b[off:len(b)-trailerSize], &idx); err != nil {
		t.Fatal(err)
	}
	idx.Tensors[0].Shape = []int{3}
	js, _ := json.Marshal(idx)
	bad := craftTrailer(append(slices.Clone(b[len(ckptMagic):off]), js...), off, uint64(len(js)))
	_, err = readCheckpoint(bytes.NewReader(bad), int64(len(bad)))
	if err == nil || !strings.Contains(err.Error(), `tensor "strategy/w": data at 8 (12 bytes) out of place`) {
		t.Fatalf("a tensor running into the index: %v", err)
	}
	if !validShape([]int{1 << 20, 1 << 20}) || validShape([]int{1<<40 + 1}) || validShape([]int{2, -1}) {
		t.Error("validShape: 2^40 values are valid, 2^40+1 and negative dimensions not")
	}
}

// binary64 reads a trailer's index offset.
func binary64(tr []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(tr[i])
	}
	return v
}

// TestPayloadAndBytes: payloads count 4 bytes a value; BytesTensor and
// TensorBytes round-trip bytes and refuse what is not one.
func TestPayloadAndBytes(t *testing.T) {
	n := tensor.Named{"a": tensor.New(2, 3), "b": tensor.New(5)}
	if got := PayloadBytes(n); got != 44 {
		t.Errorf("PayloadBytes = %d, want 44", got)
	}
	in := []byte{0, 1, 127, 200, 255}
	out, err := TensorBytes(BytesTensor(in))
	if err != nil || !bytes.Equal(in, out) {
		t.Fatalf("round trip %v (%v)", out, err)
	}
	for _, tc := range []struct {
		t    *tensor.Tensor
		want string
	}{
		{nil, "want a 1-D tensor"},
		{tensor.New(1, 2), "want a 1-D tensor"},
		{&tensor.Tensor{Shape: []int{3}, Data: []float32{1, 2}}, "want a 1-D tensor"},
		{&tensor.Tensor{Shape: []int{2}, Data: []float32{1, -1}}, "element 1 = -1 is not a byte"},
		{&tensor.Tensor{Shape: []int{2}, Data: []float32{256, 1}}, "element 0 = 256 is not a byte"},
		{&tensor.Tensor{Shape: []int{1}, Data: []float32{1.5}}, "element 0 = 1.5 is not a byte"},
	} {
		if _, err := TensorBytes(tc.t); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.t, err, tc.want)
		}
	}
}

// TestFilters: a nil Filter matches everything; Prefix, Contains and Names
// match as named.
func TestFilters(t *testing.T) {
	var all Filter
	if !all.Match("x") {
		t.Error("nil filter")
	}
	if f := Filter(Prefix("a.", "b.")); !f.Match("b.w") || f.Match("c.a.w") {
		t.Error("Prefix")
	}
	if f := Filter(Contains("ctx")); !f.Match("p.ctx.w") || f.Match("p.w") {
		t.Error("Contains")
	}
	if f := Filter(Names("x", "y")); !f.Match("y") || f.Match("xy") {
		t.Error("Names")
	}
}

// TestLayout: Flatten orders tensors by name; Unflatten inverts it and
// refuses a wrong length.
func TestLayout(t *testing.T) {
	p := tensor.Named{"b": {Shape: []int{2}, Data: []float32{3, 4}}, "a": {Shape: []int{1, 2}, Data: []float32{1, 2}}}
	x, l := Flatten(p)
	if !slices.Equal(x, []float32{1, 2, 3, 4}) || l.Len() != 4 || !l.Equal(LayoutOf(p)) {
		t.Fatalf("flatten %v, layout %+v", x, l)
	}
	if l.Equal(LayoutOf(tensor.Named{"a": tensor.New(2), "b": tensor.New(2)})) {
		t.Error("layouts of different shapes are equal")
	}
	back, err := l.Unflatten([]float64{1, 2, 3, 4})
	if err != nil || !slices.Equal(back["a"].Data, []float32{1, 2}) || !slices.Equal(back["b"].Data, []float32{3, 4}) || !slices.Equal(back["a"].Shape, []int{1, 2}) {
		t.Fatalf("unflatten %v (%v)", back, err)
	}
	if _, err := l.Unflatten(make([]float64, 3)); err == nil || !strings.Contains(err.Error(), "3 values for a layout of 4") {
		t.Errorf("short values: %v", err)
	}
}

// TestCloneMetricsNeverNil: a client reporting no metrics gets an empty,
// non-nil map (a report survives a JSON round trip unchanged); reported
// metrics are copied.
func TestCloneMetricsNeverNil(t *testing.T) {
	if m := cloneMetrics(nil); m == nil || len(m) != 0 {
		t.Errorf("cloneMetrics(nil) = %#v", m)
	}
	in := map[string]float64{"a": 1}
	m := cloneMetrics(in)
	in["a"] = 2
	if m["a"] != 1 || len(m) != 1 {
		t.Errorf("cloneMetrics copied %v", m)
	}
	if !math.IsNaN(cloneMetrics(map[string]float64{"n": math.NaN()})["n"]) {
		t.Error("NaN lost")
	}
}

// TestFailedEvaluationKeepsState: a storeless site (no folder: nothing to
// reload) whose evaluation without tensors fails keeps its trained state
// for the next round, alone or in a group.
func TestFailedEvaluationKeepsState(t *testing.T) {
	ctx := context.Background()
	for _, group := range []bool{false, true} {
		s := NewSite(&failInstall{evalInstall{w: make([]float32, 2)}}, "")
		if _, err := s.Fit(ctx, FitIns{Round: 0}); err != nil { // [1 1]
			t.Fatal(err)
		}
		var err error
		if group {
			_, errs := EvaluateSites(ctx, &recordingGroup{fail: -1}, []*Site{s}, []EvaluateIns{{Round: 0}})
			err = errs[0]
		} else {
			_, err = s.Evaluate(ctx, EvaluateIns{Round: 0})
		}
		if err == nil {
			t.Fatal("the failing evaluation succeeded")
		}
		res, err := s.Fit(ctx, FitIns{Round: 1})
		if err != nil || res.Params["w"].Data[0] != 2 {
			t.Errorf("group %v: round 1 trained from %v (%v), want [2 2] (its state after round 0)", group, res.Params["w"].Data, err)
		}
	}
}

// TestLastEvalRoundZero: LastEval finds an evaluation in round 0.
func TestLastEvalRoundZero(t *testing.T) {
	h := History{Rounds: []RoundReport{{Round: 0, Eval: map[int]Metrics{}}, {Round: 1}}}
	if r, ok := h.LastEval(); !ok || r.Round != 0 {
		t.Fatalf("LastEval = round %d, %v; want round 0", r.Round, ok)
	}
}

// TestSamplerOracle: the sampled rounds are those of the documented
// algorithm, written here from the doc comment: a partial Fisher–Yates
// shuffle of the sorted IDs drawing IntN(n−i) for i < m from PCG(seed,
// 0x9e3779b97f4a7c15), sorted.
func TestSamplerOracle(t *testing.T) {
	ids := []int{0, 1, 2, 3, 4, 5, 6}
	r := mrand.New(mrand.NewPCG(17, 0x9e3779b97f4a7c15))
	s := NewSampler(0.45, 17) // m = 3
	for round := 1; round <= 30; round++ {
		pool := slices.Clone(ids)
		for i := 0; i < 3; i++ {
			j := i + r.IntN(len(pool)-i)
			pool[i], pool[j] = pool[j], pool[i]
		}
		want := slices.Sorted(slices.Values(pool[:3]))
		if got := s.Sample(round, ids); !slices.Equal(got, want) {
			t.Fatalf("round %d: sampled %v, the documented algorithm %v", round, got, want)
		}
	}
}
