// Package methodtest holds the checks the methods' own tests share: driving
// a plan's rounds by hand, the resume-bit-identical check, bit-for-bit
// comparisons of tensors and logits, in-memory clients, and the refusal of
// bad settings by key.
package methodtest

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/internal/tensortest"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

// InitStrategy introduces plan's clients to its strategy, as the
// coordinator does before the first round.
func InitStrategy(t testing.TB, plan *methods.Plan) {
	t.Helper()
	var infos []federation.ClientInfo
	for _, c := range plan.Clients {
		infos = append(infos, federation.ClientInfo{ID: c.ID(), NumExamples: c.NumExamples()})
	}
	if err := plan.Strategy.Init(infos); err != nil {
		t.Fatal(err)
	}
}

// Round runs round r of plan by hand: the strategy's instructions to the
// clients ids (indices into plan.Clients), their fits and the aggregation.
// It returns the uploads.
func Round(t testing.TB, plan *methods.Plan, r int, ids []int) []federation.FitResult {
	t.Helper()
	ins, err := plan.Strategy.Configure(r, ids)
	if err != nil {
		t.Fatal(err)
	}
	var res []federation.FitResult
	for _, id := range ids {
		c := plan.Clients[id]
		fr, err := c.Fit(context.Background(), federation.FitIns{Round: r, Params: ins[c.ID()]})
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, federation.FitResult{ClientID: c.ID(), NumExamples: fr.NumExamples, Params: fr.Params})
	}
	if err := plan.Strategy.Aggregate(r, res, nil); err != nil {
		t.Fatal(err)
	}
	return res
}

// SameNamed fails t unless got and want hold the same tensors bit for bit.
func SameNamed(t testing.TB, what string, got, want tensor.Named) {
	t.Helper()
	if d := tensortest.BitsDiff(got, want); d != "" {
		t.Fatalf("%s: not bit-identical: %s", what, d)
	}
}

// SameLogits fails t unless got and want are the same logits bit for bit
// (a predictor against the evaluation).
func SameLogits(t testing.TB, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d logits, want %d", len(got), len(want))
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("logit %d: predictor %g, evaluation %g", i, got[i], want[i])
		}
	}
}

// Resumed is what Resume ran: the plan that ran every round straight and
// its uploads in each round, the one restored after round 1, and the
// sites' states it was restored from.
type Resumed struct {
	Straight, Resumed *methods.Plan
	Uploads           [3][]federation.FitResult
	Saved             []tensor.Named
}

// Resume checks that a run resumes bit for bit: three rounds of build's
// plans (schedule[r] the clients of round r) straight equal two rounds, a
// save of every site's state and the server's, a fresh plan restored from
// it and the third round — every site's state and kept tensors and the
// global model.
func Resume(t testing.TB, build func() *methods.Plan, schedule [3][]int) Resumed {
	t.Helper()
	straight := build()
	var uploads [3][]federation.FitResult
	for r, ids := range schedule {
		uploads[r] = Round(t, straight, r, ids)
	}
	first := build()
	Round(t, first, 0, schedule[0])
	Round(t, first, 1, schedule[1])
	var saved []tensor.Named
	for _, c := range first.Clients {
		st, err := c.State()
		if err != nil {
			t.Fatal(err)
		}
		saved = append(saved, st)
	}
	server := first.Strategy.State()
	resumed := build()
	for i, c := range resumed.Clients {
		if err := c.LoadState(saved[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := resumed.Strategy.LoadState(server); err != nil {
		t.Fatal(err)
	}
	Round(t, resumed, 2, schedule[2])
	for i := range straight.Clients {
		a, err := straight.Clients[i].State()
		if err != nil {
			t.Fatal(err)
		}
		b, err := resumed.Clients[i].State()
		if err != nil {
			t.Fatal(err)
		}
		SameNamed(t, "site state", b, a)
		if straight.Site != nil {
			a, err := straight.Site(i)
			if err != nil {
				t.Fatal(err)
			}
			b, err := resumed.Site(i)
			if err != nil {
				t.Fatal(err)
			}
			SameNamed(t, "site", b, a)
		}
	}
	SameNamed(t, "global", resumed.Global(), straight.Global())
	return Resumed{Straight: straight, Resumed: resumed, Uploads: uploads, Saved: saved}
}

// GlobalMoved fails t unless the straight run's global model differs from
// the first site's parameters saved after round 1 ("param/<name>"): the
// third round trained.
func (r Resumed) GlobalMoved(t testing.TB, what string) {
	t.Helper()
	for name, g := range r.Straight.Global() {
		for i, v := range g.Data {
			if v != r.Saved[0]["param/"+name].Data[i] {
				return
			}
		}
	}
	t.Errorf("the third round did not move the global %s", what)
}

// TensorClients returns n in-memory clients of N random images each (pixels
// of a size×size model, uniform in ±1) with labels below C, drawn from rng.
func TensorClients(rng *rand.Rand, n, N, size, C int) []parity.TensorClient {
	var out []parity.TensorClient
	for range n {
		tc := parity.TensorClient{Pixels: gradcheck.Rand(rng, N*3*size*size, 1)}
		for range N {
			tc.Labels = append(tc.Labels, rng.IntN(C))
		}
		out = append(out, tc)
	}
	return out
}

// RejectsSettings checks that the experiment's validation refuses each
// case {"method.key=value", what the error must name} (method among the
// experiment's methods).
func RejectsSettings(t testing.TB, method string, cases [][2]string) {
	t.Helper()
	for _, tc := range cases {
		set, want := tc[0], tc[1]
		e := config.Default()
		e.Methods = []string{method}
		k, v, _ := strings.Cut(set, "=")
		if err := e.Set(k, v); err != nil {
			t.Fatal(err)
		}
		if err := e.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one naming %s", set, err, want)
		}
	}
}
