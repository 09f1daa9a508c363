package robust

import (
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/tensor"
)

func fedavg(init []float32) *strategy.FedAvg {
	return &strategy.FedAvg{Shared: federation.Prefix("w"), Initial: tensor.Named{"w": {Shape: []int{len(init)}, Data: init}}}
}

// run wraps a FedAvg starting at init, configures round 0 for the clients
// of ups and aggregates their uploads; it returns the new global.
func run(t *testing.T, opts Options, init []float32, ups [][]float32, ns []int) (tensor.Named, *Strategy) {
	t.Helper()
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	inner := fedavg(init)
	s, err := Wrap(inner, opts)
	if err != nil {
		t.Fatal(err)
	}
	var infos []federation.ClientInfo
	var ids []int
	var res []federation.FitResult
	for i, u := range ups {
		infos = append(infos, federation.ClientInfo{ID: i, NumExamples: ns[i]})
		ids = append(ids, i)
		res = append(res, federation.FitResult{ClientID: i, NumExamples: ns[i], Params: tensor.Named{"w": {Shape: []int{len(u)}, Data: u}}})
	}
	if err := s.Init(infos); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Configure(0, ids); err != nil {
		t.Fatal(err)
	}
	if err := s.Aggregate(0, res, nil); err != nil {
		t.Fatal(err)
	}
	return inner.Global(), s
}

func TestOffIsIdentity(t *testing.T) {
	ups := [][]float32{{1, 2}, {3, -4}, {0.5, 7}}
	ns := []int{3, 5, 2}
	got, _ := run(t, Options{}, []float32{0.1, 0.2}, ups, ns)
	plain := fedavg([]float32{0.1, 0.2})
	plain.Init([]federation.ClientInfo{{ID: 0, NumExamples: 3}, {ID: 1, NumExamples: 5}, {ID: 2, NumExamples: 2}})
	var res []federation.FitResult
	for i, u := range ups {
		res = append(res, federation.FitResult{ClientID: i, NumExamples: ns[i], Params: tensor.Named{"w": {Shape: []int{2}, Data: u}}})
	}
	if err := plain.Aggregate(0, res, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got["w"].Data, plain.Global()["w"].Data) {
		t.Fatalf("wrapped %v, plain %v", got["w"].Data, plain.Global()["w"].Data)
	}
}

func TestMedianAndTrimmedMeanResistOutlier(t *testing.T) {
	init := []float32{1, 1}
	ups := [][]float32{{2, 0}, {3, 1}, {1e6, -1e6}, {4, 2}, {2.5, 0.5}}
	ns := []int{1, 1, 1, 1, 1}
	got, _ := run(t, Options{Rule: Median}, init, ups, ns)
	// deltas (1,-1) (2,0) (1e6-1, …) (3,1) (1.5,-0.5): medians 2 and -0.5
	if w := got["w"].Data; w[0] != 3 || w[1] != 0.5 {
		t.Fatalf("median global %v, want [3 0.5]", w)
	}
	got, _ = run(t, Options{Rule: TrimmedMean, Trim: 0.2}, init, ups, ns)
	// drop 1 at each end: x: deltas 1,1.5,2,3 → mean of 1.5,2,3 = 6.5/3
	want0 := float32(1 + 6.5/3.0)
	want1 := float32(1 + (-1-0.5+0)/3.0)
	if w := got["w"].Data; math.Abs(float64(w[0]-want0)) > 1e-6 || math.Abs(float64(w[1]-want1)) > 1e-6 {
		t.Fatalf("trimmed global %v, want [%v %v]", w, want0, want1)
	}
	plain, _ := run(t, Options{Rule: Mean, ClipNorm: 0}, init, ups, ns)
	if plain["w"].Data[0] < 1000 {
		t.Fatal("the plain mean should be dragged by the outlier (test setup)")
	}
}

func TestClipNorm(t *testing.T) {
	init := []float32{0, 0}
	got, _ := run(t, Options{ClipNorm: 1}, init, [][]float32{{3, 4}, {0.3, 0.4}}, []int{1, 1})
	// (3,4) is clipped to (0.6,0.8); mean with (0.3,0.4)
	want := []float32{0.45, 0.6}
	for j := range want {
		if math.Abs(float64(got["w"].Data[j]-want[j])) > 1e-6 {
			t.Fatalf("clipped global %v, want %v", got["w"].Data, want)
		}
	}
}

func TestDPNoiseSeededAndAccounted(t *testing.T) {
	const d = 20000
	init := make([]float32, d)
	ups := [][]float32{make([]float32, d), make([]float32, d), make([]float32, d), make([]float32, d)}
	ns := []int{1, 1, 1, 1}
	dp := &DP{Clip: 0.5, NoiseMultiplier: 2, Delta: 1e-5, Seed: 11}
	a, s := run(t, Options{DP: dp}, init, ups, ns)
	b, _ := run(t, Options{DP: dp}, init, ups, ns)
	if !slices.Equal(a["w"].Data, b["w"].Data) {
		t.Fatal("DP noise is not reproducible with the same seed")
	}
	dp2 := *dp
	dp2.Seed = 12
	c, _ := run(t, Options{DP: &dp2}, init, ups, ns)
	if slices.Equal(a["w"].Data, c["w"].Data) {
		t.Fatal("DP noise does not depend on the seed")
	}
	// zero updates: the global is pure noise of std σC/m
	var ss float64
	for _, v := range a["w"].Data {
		ss += float64(v) * float64(v)
	}
	std, want := math.Sqrt(ss/d), 2*0.5/4.0
	if math.Abs(std-want) > 0.03*want {
		t.Fatalf("noise std %v, want %v", std, want)
	}
	if e := s.Epsilon(); !(e > 0) || e != Epsilon(1, 2, 1e-5) {
		t.Fatalf("epsilon after one round %v", e)
	}
	// more rounds cost more, more noise costs less
	if !(Epsilon(10, 2, 1e-5) > Epsilon(1, 2, 1e-5)) || !(Epsilon(10, 4, 1e-5) < Epsilon(10, 2, 1e-5)) {
		t.Fatal("epsilon not monotonic")
	}
	// the RDP bound is at most the closed form at the best real α
	T, sg, dl := 10.0, 2.0, 1e-5
	L := math.Log(1 / dl)
	alpha := 1 + math.Sqrt(2*sg*sg*L/T)
	closed := T*alpha/(2*sg*sg) + L/(alpha-1)
	if e := Epsilon(10, 2, 1e-5); e > closed*1.001 || e < closed*0.99 {
		t.Fatalf("epsilon %v, closed form %v", e, closed)
	}
	// state round trip keeps the accountant
	st := s.State()
	s2, _ := Wrap(fedavg(init), Options{DP: dp})
	s2.Init([]federation.ClientInfo{{ID: 0, NumExamples: 1}})
	if err := s2.LoadState(st); err != nil {
		t.Fatal(err)
	}
	if s2.Epsilon() != s.Epsilon() {
		t.Fatalf("epsilon after LoadState %v, want %v", s2.Epsilon(), s.Epsilon())
	}
}

func TestWrapRejectsBadOptions(t *testing.T) {
	for _, o := range []Options{{Rule: 7}, {Rule: TrimmedMean, Trim: 0.5}, {Trim: 0.1}, {ClipNorm: -1},
		{DP: &DP{Clip: 0, NoiseMultiplier: 1, Delta: 1e-5}}, {Rule: Median, DP: &DP{Clip: 1, NoiseMultiplier: 1, Delta: 1e-5}}} {
		if _, err := Wrap(fedavg([]float32{0}), o); err == nil {
			t.Errorf("Wrap(%+v) succeeded", o)
		}
	}
}

// TestPerClientStrategiesRefused (issue 17, defect 4): a strategy that
// keeps each client's tensors (pFedMoAP's pool, ADAPT's relay) cannot take
// a median, a trimmed mean or DP's noisy mean — the wrapper would hand it
// one synthetic result and the pool would collapse to one entry — so Wrap
// refuses it before any round, with the reason; clipping alone composes.
func TestPerClientStrategiesRefused(t *testing.T) {
	per := map[string]func() federation.Strategy{
		"knn-pool": func() federation.Strategy { return &strategy.KNNPool{Shared: federation.Names("ctx"), K: 1} },
		"relay":    func() federation.Strategy { return &strategy.Relay{} },
	}
	bad := map[string]Options{
		"median":       {Rule: Median},
		"trimmed-mean": {Rule: TrimmedMean, Trim: 0.1},
		"dp":           {DP: &DP{Clip: 1, NoiseMultiplier: 1, Delta: 1e-5}},
	}
	for sn, mk := range per {
		for rn, o := range bad {
			if _, err := Wrap(mk(), o); err == nil || !strings.Contains(err.Error(), "keeps each client's own tensors") {
				t.Errorf("%s with %s: error %v, want a refusal naming the per-client tensors", sn, rn, err)
			}
		}
		if _, err := Wrap(mk(), Options{ClipNorm: 1}); err != nil {
			t.Errorf("%s with clip-norm alone: %v", sn, err)
		}
	}
	if _, err := Wrap(&strategy.FedAvg{}, Options{Rule: Median}); err != nil {
		t.Errorf("FedAvg with median: %v", err)
	}
}
