package strategy

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	. "github.com/pfedmma/pfedmma/federation"

	"github.com/pfedmma/pfedmma/tensor"
)

var quiet = slog.New(slog.DiscardHandler)

func vec(v ...float32) *tensor.Tensor { return &tensor.Tensor{Shape: []int{len(v)}, Data: v} }

func infos(ns ...int) []ClientInfo {
	out := make([]ClientInfo, len(ns))
	for i, n := range ns {
		out[i] = ClientInfo{ID: i, NumExamples: n}
	}
	return out
}

func TestFedAvgWeighting(t *testing.T) {
	a := []float32{0.1, -3, 7.25}
	b := []float32{0.7, 1, -2}
	tests := []struct {
		name    string
		uniform bool
		wa, wb  float64
	}{
		{"weighted 8/12 4/12", false, 8.0 / 12, 4.0 / 12},
		{"uniform", true, 0.5, 0.5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &FedAvg{Shared: Prefix("shared."), Uniform: tc.uniform}
			if err := s.Init(infos(8, 4, 100)); err != nil {
				t.Fatal(err)
			}
			// Client 2 (100 examples) does not take part: weights are over
			// participants only.
			err := s.Aggregate(1, []FitResult{
				{ClientID: 0, NumExamples: 8, Params: tensor.Named{"shared.x": vec(a...)}},
				{ClientID: 1, NumExamples: 4, Params: tensor.Named{"shared.x": vec(b...)}},
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			g := s.Global()["shared.x"]
			for i := range a {
				want := float32(tc.wa*float64(a[i]) + tc.wb*float64(b[i]))
				if g.Data[i] != want {
					t.Errorf("global[%d] = %v, want %v", i, g.Data[i], want)
				}
			}
			in, err := s.Configure(2, []int{0, 2})
			if err != nil {
				t.Fatal(err)
			}
			if len(in) != 2 || !reflect.DeepEqual(in[0], s.Global()) || !reflect.DeepEqual(in[2], s.Global()) {
				t.Errorf("Configure = %v, want the global for clients 0 and 2", in)
			}
			in[0]["shared.x"].Data[0] = 1e9
			if s.Global()["shared.x"].Data[0] == 1e9 {
				t.Error("Configure shares memory with the global")
			}
		})
	}
}

func TestAggregateErrors(t *testing.T) {
	tests := []struct {
		name    string
		results []FitResult
		token   string
	}{
		{"private upload", []FitResult{{ClientID: 0, NumExamples: 1, Params: tensor.Named{"shared.x": vec(1), "private.b": vec(2)}}}, `"private.b"`},
		{"missing name", []FitResult{
			{ClientID: 0, NumExamples: 1, Params: tensor.Named{"shared.x": vec(1), "shared.y": vec(1)}},
			{ClientID: 1, NumExamples: 1, Params: tensor.Named{"shared.x": vec(1)}}}, `"shared.y"`},
		{"extra name", []FitResult{
			{ClientID: 0, NumExamples: 1, Params: tensor.Named{"shared.x": vec(1)}},
			{ClientID: 1, NumExamples: 1, Params: tensor.Named{"shared.x": vec(1), "shared.y": vec(1)}}}, `"shared.y"`},
		{"shape", []FitResult{
			{ClientID: 0, NumExamples: 1, Params: tensor.Named{"shared.x": vec(1)}},
			{ClientID: 1, NumExamples: 1, Params: tensor.Named{"shared.x": vec(1, 2)}}}, "shape"},
		{"unknown client", []FitResult{{ClientID: 9, NumExamples: 1, Params: tensor.Named{}}}, "client 9"},
		{"duplicate client", []FitResult{{ClientID: 1, NumExamples: 1}, {ClientID: 1, NumExamples: 1}}, "client 1"},
		{"zero examples", []FitResult{{ClientID: 0, Params: tensor.Named{"shared.x": vec(1)}}}, "examples"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &FedAvg{Shared: Prefix("shared.")}
			if err := s.Init(infos(1, 1)); err != nil {
				t.Fatal(err)
			}
			err := s.Aggregate(0, tc.results, nil)
			if err == nil || !strings.Contains(err.Error(), tc.token) {
				t.Errorf("error = %v, want one containing %s", err, tc.token)
			}
		})
	}
}

func TestKNNPoolNeighbours(t *testing.T) {
	// Prompts (p, −p) with p = 0, 1, 3, 10, 2; ties (client 4 is equidistant
	// from 1 and 2, client 1 from 0 and 4) go to the lower ID. Client 5 has
	// never uploaded.
	pos := []float32{0, 1, 3, 10, 2}
	s := &KNNPool{Shared: Names("ctx"), K: 2}
	if err := s.Init(infos(1, 1, 1, 1, 1, 1)); err != nil {
		t.Fatal(err)
	}
	var res []FitResult
	for id, p := range pos {
		res = append(res, FitResult{ClientID: id, NumExamples: 1, Params: tensor.Named{"ctx": vec(p, -p)}})
	}
	if err := s.Aggregate(0, res, nil); err != nil {
		t.Fatal(err)
	}
	want := map[int][]int{0: {1, 4}, 1: {0, 4}, 2: {4, 1}, 3: {2, 4}, 4: {1, 2}, 5: nil}
	for id, w := range want {
		got, err := s.Neighbours(id)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, w) {
			t.Errorf("neighbours of %d = %v, want %v", id, got, w)
		}
	}
	in, err := s.Configure(1, []int{3, 5})
	if err != nil {
		t.Fatal(err)
	}
	g, experts, err := SplitExperts(in[3])
	if err != nil {
		t.Fatal(err)
	}
	if g["ctx"].Data[0] != 16.0/5 || len(experts) != 2 || experts[0]["ctx"].Data[0] != 3 || experts[1]["ctx"].Data[0] != 2 {
		t.Errorf("client 3 got global %v, experts %v", g["ctx"].Data, experts)
	}
	if len(in[5]) != 1 {
		t.Errorf("first-time client 5 got %d tensors, want the global only", len(in[5]))
	}
	// K < 0 sends every other pool entry; K = 0 none (pFedMoAP's
	// num_experts 1: the local prompt alone, issue 17 defect 3).
	s.K = -1
	if nb, _ := s.Neighbours(0); len(nb) != 4 {
		t.Errorf("K=-1 neighbours = %v, want all 4 others", nb)
	}
	s.K = 0
	if nb, _ := s.Neighbours(0); len(nb) != 0 {
		t.Errorf("K=0 neighbours = %v, want none", nb)
	}
	for _, random := range []bool{false, true} {
		s.Random = random
		in0, err := s.Configure(1, []int{0})
		if err != nil {
			t.Fatal(err)
		}
		if _, experts, _ := SplitExperts(in0[0]); len(experts) != 0 {
			t.Errorf("K=0 (random %v): client 0 received %d other clients' prompts", random, len(experts))
		}
	}
	s.Random = false
	// A later upload overwrites the pool entry: client 3 moves next to 0.
	if err := s.Aggregate(1, []FitResult{{ClientID: 3, NumExamples: 1, Params: tensor.Named{"ctx": vec(0.1, -0.1)}}}, nil); err != nil {
		t.Fatal(err)
	}
	s.K = 1
	if nb, _ := s.Neighbours(0); !slices.Equal(nb, []int{3}) {
		t.Errorf("after update neighbours of 0 = %v, want [3]", nb)
	}
	// State round trip into a fresh strategy.
	s2 := &KNNPool{Shared: Names("ctx"), K: 1}
	if err := s2.Init(infos(1, 1, 1, 1, 1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s2.LoadState(s.State()); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s2.State(), s.State()) {
		t.Error("KNN state did not round-trip")
	}
	bad := s.State()
	bad["pool/17/ctx"] = vec(1, 2)
	if err := s2.LoadState(bad); err == nil || !strings.Contains(err.Error(), `"pool/17/ctx"`) {
		t.Errorf("LoadState with unknown client: %v", err)
	}
}

func TestRelay(t *testing.T) {
	s := &Relay{Relayed: Prefix("text."), Averaged: Prefix("visual.")}
	if err := s.Init(infos(10, 30, 5)); err != nil {
		t.Fatal(err)
	}
	err := s.Aggregate(0, []FitResult{
		{ClientID: 0, NumExamples: 10, Params: tensor.Named{"text.p": vec(1, 1), "visual.v": vec(2)}},
		{ClientID: 1, NumExamples: 30, Params: tensor.Named{"text.p": vec(5, 5), "visual.v": vec(4)}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	in, err := s.Configure(1, []int{0, 2})
	if err != nil {
		t.Fatal(err)
	}
	g, rel, err := SplitRelayed(in[0])
	if err != nil {
		t.Fatal(err)
	}
	if g["visual.v"].Data[0] != 3 { // uniform mean, not (10·2+30·4)/40
		t.Errorf("averaged visual.v = %v, want 3", g["visual.v"].Data[0])
	}
	if len(rel) != 1 || rel[1]["text.p"].Data[0] != 5 {
		t.Errorf("client 0 got relayed %v, want client 1's text.p only", rel)
	}
	_, rel2, _ := SplitRelayed(in[2])
	if len(rel2) != 2 || rel2[0]["text.p"].Data[0] != 1 || rel2[1]["text.p"].Data[0] != 5 {
		t.Errorf("client 2 got relayed %v, want clients 0 and 1", rel2)
	}
	if err := s.Aggregate(1, []FitResult{{ClientID: 2, NumExamples: 5, Params: tensor.Named{"other": vec(1)}}}, nil); err == nil {
		t.Error("Relay accepted a name that is neither relayed nor averaged")
	}
	s2 := &Relay{Relayed: Prefix("text."), Averaged: Prefix("visual.")}
	if err := s2.Init(infos(10, 30, 5)); err != nil {
		t.Fatal(err)
	}
	if err := s2.LoadState(s.State()); err != nil || !reflect.DeepEqual(s2.State(), s.State()) {
		t.Errorf("relay state round trip: %v", err)
	}
}

func TestSampler(t *testing.T) {
	ids := []int{9, 3, 0, 5, 7, 1, 2, 8, 6, 4}
	tests := []struct {
		fraction float64
		want     int
	}{{0.1, 1}, {0.3, 3}, {0.01, 1}, {0.55, 5}, {1, 10}, {2, 10}}
	for _, tc := range tests {
		a, b := NewSampler(tc.fraction, 42), NewSampler(tc.fraction, 42)
		if got := a.Sample(0, ids); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
			t.Errorf("fraction %g: round 0 = %v, want all clients sorted", tc.fraction, got)
		}
		b.Sample(0, ids)
		for r := 1; r < 20; r++ {
			got := a.Sample(r, ids)
			if len(got) != tc.want || !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
				t.Fatalf("fraction %g round %d: %v, want %d distinct sorted ids", tc.fraction, r, got, tc.want)
			}
			if again := b.Sample(r, ids); !slices.Equal(got, again) {
				t.Fatalf("same seed gave %v and %v", got, again)
			}
		}
	}
	// State round trip: a restored sampler continues identically, and
	// another seed gives another sequence.
	a := NewSampler(0.3, 7)
	for r := 0; r < 5; r++ {
		a.Sample(r, ids)
	}
	st, err := a.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var b Sampler
	b.Fraction = 0.3
	if err := b.UnmarshalBinary(st); err != nil {
		t.Fatal(err)
	}
	c := NewSampler(0.3, 8)
	differ := false
	for r := 5; r < 15; r++ {
		x := a.Sample(r, ids)
		if y := b.Sample(r, ids); !slices.Equal(x, y) {
			t.Fatalf("restored sampler round %d: %v, original %v", r, y, x)
		}
		differ = differ || !slices.Equal(x, c.Sample(r, ids))
	}
	if !differ {
		t.Error("seeds 7 and 8 sampled identically for 10 rounds")
	}
}

func TestSamplerCoverage(t *testing.T) {
	// Uniform without replacement: over many rounds every client is drawn
	// about equally often.
	ids := []int{0, 1, 2, 3, 4}
	s := NewSampler(0.4, 1)
	count := make([]int, 5)
	const rounds = 5000
	for r := 1; r <= rounds; r++ {
		for _, id := range s.Sample(r, ids) {
			count[id]++
		}
	}
	for id, c := range count {
		if f := float64(c) / rounds; math.Abs(f-0.4) > 0.03 {
			t.Errorf("client %d drawn in %.3f of rounds, want 0.4", id, f)
		}
	}
}

type recordingClient struct {
	Client
	in, out []tensor.Named
}

func (r *recordingClient) Fit(ctx context.Context, ins FitIns) (FitRes, error) {
	r.in = append(r.in, ins.Params.Clone())
	res, err := r.Client.Fit(ctx, ins)
	if err == nil {
		r.out = append(r.out, res.Params.Clone())
	}
	return res, err
}

func TestPrivateNeverLeaves(t *testing.T) {
	var clients []Client
	var rec []*recordingClient
	for id := 0; id < 4; id++ {
		r := &recordingClient{Client: newToy(id, 0)}
		rec = append(rec, r)
		clients = append(clients, r)
	}
	sim := &Coordinator{Logger: quiet, Strategy: &FedAvg{Shared: Names("shared.w")}, Proxies: sites(clients, ""), Rounds: 3, Fraction: 0.5, Seed: 3}
	hist, err := sim.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var up, down int64
	for _, r := range hist.Rounds {
		up += r.BytesUp
		down += r.BytesDown
	}
	var msgs, wantUp, wantDown int64
	for _, r := range rec {
		for _, m := range append(slices.Clone(r.in), r.out...) {
			for k := range m {
				if strings.HasPrefix(k, "private.") || strings.HasPrefix(k, "own.") {
					t.Errorf("client %d: %q crossed the network", r.ID(), k)
				}
			}
		}
		for _, m := range r.out {
			wantUp += PayloadBytes(m)
			msgs++
		}
		for _, m := range r.in {
			wantDown += PayloadBytes(m)
		}
	}
	// Round 0 takes all 4 clients, rounds 1-2 two each; each upload is 3 floats.
	if msgs != 8 || up != wantUp || up != 8*12 || down != wantDown || down != (8-4)*12 {
		t.Errorf("%d uploads, bytes up %d (recorded %d), down %d (recorded %d)", msgs, up, wantUp, down, wantDown)
	}
	leaky := newToy(1, 0)
	leaky.leak = true
	sim = &Coordinator{Logger: quiet, Strategy: &FedAvg{Shared: Names("shared.w")}, Proxies: sites([]Client{newToy(0, 0), leaky}, ""), Rounds: 2, Fraction: 1}
	if _, err := sim.Run(context.Background()); err == nil || !strings.Contains(err.Error(), `"private.b"`) {
		t.Errorf("leaking client: error = %v, want one naming private.b", err)
	}
}

func TestEvalScheduleAndMeans(t *testing.T) {
	var clients []Client
	for id := 0; id < 3; id++ {
		clients = append(clients, newToy(id, 0))
	}
	var phases []string
	sim := &Coordinator{Logger: quiet, Strategy: &FedAvg{}, Proxies: sites(clients, ""), Rounds: 5, Fraction: 1, EvalEvery: 2,
		Progress: func(p Progress) { phases = append(phases, p.Phase) }}
	hist, err := sim.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var evaluated []int
	for _, r := range hist.Rounds {
		if r.Eval != nil {
			evaluated = append(evaluated, r.Round)
			var sum float64
			for _, m := range r.Eval {
				sum += m["mse"]
			}
			if len(r.Eval) != 3 || math.Abs(r.EvalMean["mse"]-sum/3) > 1e-15 || r.EvalMean["id"] != 1 {
				t.Errorf("round %d: eval mean %v is not the unweighted mean of %v", r.Round, r.EvalMean, r.Eval)
			}
		}
	}
	if !slices.Equal(evaluated, []int{1, 3, 4}) {
		t.Errorf("evaluated after rounds %v, want [1 3 4]", evaluated)
	}
	if len(phases) != 5*3+3*3 {
		t.Errorf("%d progress events, want %d", len(phases), 5*3+3*3)
	}
	last, ok := hist.LastEval()
	if !ok || last.Round != 4 {
		t.Errorf("LastEval = round %d, %v", last.Round, ok)
	}
	if first, final := hist.Rounds[1].EvalMean["mse"], last.EvalMean["mse"]; !(final < first) {
		t.Errorf("training did not reduce the mean mse: %v -> %v", first, final)
	}
}

func TestMetricsJSON(t *testing.T) {
	tests := []Metrics{nil, {}, {"a": 0.1 + 0.2, "nan": math.NaN(), "inf": math.Inf(1), "ninf": math.Inf(-1), "tiny": 5e-324}}
	for _, m := range tests {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var got Metrics
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if (m == nil) != (got == nil) || len(m) != len(got) {
			t.Errorf("%v became %v via %s", m, got, b)
		}
		for k, v := range m {
			if math.Float64bits(v) != math.Float64bits(got[k]) && !(math.IsNaN(v) && math.IsNaN(got[k])) {
				t.Errorf("%q: %v became %v", k, v, got[k])
			}
		}
	}
	var m Metrics
	if err := json.Unmarshal([]byte(`{"x": "abc"}`), &m); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("bad metric string: %v", err)
	}
}
