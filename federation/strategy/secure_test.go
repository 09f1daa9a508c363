package strategy

import (
	"context"
	"math"
	"strings"
	"testing"

	. "github.com/pfedmma/pfedmma/federation"

	"github.com/pfedmma/pfedmma/secagg"
	"github.com/pfedmma/pfedmma/tensor"
)

// A simulation with secure aggregation gives FedAvg's (and the uniform
// mean's) global within the quantiser's bound after a round, and stays
// close over several rounds.
func TestSimulatedSecureEqualsFedAvg(t *testing.T) {
	q := secagg.Quantizer{Clip: secagg.DefaultClip, ScaleBits: secagg.DefaultScaleBits}
	for _, uniform := range []bool{false, true} {
		for _, rounds := range []int{1, 4} {
			run := func(secure bool) *FedAvg {
				var clients []Client
				for id := range 5 {
					clients = append(clients, newToy(id, 0.1))
				}
				fa := &FedAvg{Shared: Names("shared.w"), Uniform: uniform}
				sim := &Coordinator{Logger: quiet, Strategy: fa, Proxies: sites(clients, ""), Rounds: rounds, Fraction: 0.6, Seed: 5, NoEvaluate: true}
				if secure {
					sim.Secure = &SimulatedSecure{Quant: q, Uniform: uniform}
				}
				hist, err := sim.Run(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				for _, rep := range hist.Rounds {
					want := int64(len(rep.Participants)) * 4 * 3 // float32 shared.w [3]
					if secure {
						want = int64(len(rep.Participants)) * 8 * 4 // 3 values and the weight in 64-bit words
					}
					if rep.BytesUp != want {
						t.Fatalf("secure %v round %d: %d bytes up, want %d", secure, rep.Round, rep.BytesUp, want)
					}
				}
				return fa
			}
			plain, sec := run(false).Global()["shared.w"], run(true).Global()["shared.w"]
			// one round: the bound, plus one float32 rounding of each result
			tol := q.Bound() + 2*float64(float32(1)/(1<<23))*0.5
			if rounds > 1 {
				tol = 1e-5 // the difference propagates through training
			}
			var diff float64
			for i := range plain.Data {
				diff = max(diff, math.Abs(float64(plain.Data[i])-float64(sec.Data[i])))
			}
			if diff > tol {
				t.Errorf("uniform %v, %d rounds: secure global differs from FedAvg's by %g > %g", uniform, rounds, diff, tol)
			}
		}
	}
}

// A coarse quantiser shows the secure path is taken: the error is visible
// and within its bound.
func TestSimulatedSecureCoarse(t *testing.T) {
	q := secagg.Quantizer{Clip: 4, ScaleBits: 4}
	var res []FitResult
	for id := range 3 {
		res = append(res, FitResult{ClientID: id, NumExamples: 1 + 2*id, Params: tensor.Named{"w": vec(0.3*float32(id)+0.01, -0.77, 0.5)}})
	}
	fa := &FedAvg{}
	if err := fa.Init(infos(1, 3, 5)); err != nil {
		t.Fatal(err)
	}
	if err := fa.Aggregate(0, res, nil); err != nil {
		t.Fatal(err)
	}
	comb, err := (&SimulatedSecure{Quant: q}).Combine(context.Background(), 0, res)
	if err != nil {
		t.Fatal(err)
	}
	if comb.NumExamples != 9 || comb.ClientID != 0 {
		t.Fatalf("combined result: client %d, %d examples; want 0, 9", comb.ClientID, comb.NumExamples)
	}
	want, got := fa.Global()["w"].Data, comb.Params["w"].Data
	var diff float64
	for i := range want {
		diff = max(diff, math.Abs(float64(want[i])-float64(got[i])))
	}
	if diff == 0 || diff > q.Bound()+1e-7 {
		t.Fatalf("coarse secure mean %v vs FedAvg %v: max diff %g, want in (0, %g]", got, want, diff, q.Bound())
	}
}

func TestSimulatedSecureRefusesMismatch(t *testing.T) {
	s := &SimulatedSecure{Quant: secagg.Quantizer{Clip: 1, ScaleBits: 24}}
	_, err := s.Combine(context.Background(), 0, []FitResult{
		{ClientID: 0, NumExamples: 2, Params: map[string]*tensor.Tensor{"a": vec(1)}},
		{ClientID: 1, NumExamples: 2, Params: map[string]*tensor.Tensor{"b": vec(1)}},
	})
	if err == nil {
		t.Fatal("results with different tensors combined")
	}
	_, err = s.Combine(context.Background(), 0, []FitResult{{ClientID: 0, NumExamples: 0, Params: map[string]*tensor.Tensor{"a": vec(1)}}})
	if err == nil {
		t.Fatal("a result of 0 examples combined with FedAvg weights")
	}
}

// A federation whose sampled rounds take one client is refused: its "sum"
// would be that client's update.
func TestSecureRefusesSingleClientRounds(t *testing.T) {
	var clients []Client
	for id := range 3 {
		clients = append(clients, newToy(id, 0.1))
	}
	sim := &Coordinator{Logger: quiet, Strategy: &FedAvg{Shared: Names("shared.w")}, Proxies: sites(clients, ""), Rounds: 2, Fraction: 0.4,
		Secure: &SimulatedSecure{Quant: secagg.Quantizer{Clip: 1, ScaleBits: 24}}}
	if _, err := sim.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "federation.fraction") {
		t.Fatalf("3 clients at fraction 0.4 with secure aggregation: %v, want a refusal naming federation.fraction", err)
	}
	sim.Fraction = 0.7
	if _, err := sim.Run(context.Background()); err != nil {
		t.Fatalf("2 clients a round: %v", err)
	}
}
