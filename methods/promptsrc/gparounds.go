package promptsrc

import (
	"fmt"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/tensor"
)

// promptsrc.gpa_over values.
const (
	// GPAOverEpochs is the authors' rule: each client over its local
	// epochs (gpaSite).
	GPAOverEpochs = "epochs"
	// GPAOverRounds is FLiP's: the server over the rounds (roundsGPA).
	GPAOverRounds = "rounds"
)

// RoundWeights returns FLiP's server-side GPA weights over the rounds
// t = 0..R−1: g_t = N(t; mean, std²) / Σ_{t'} N(t'; mean, std²)
// (flcore/models/clip/PromptSRC.py: gauss(a) for a in range(0,
// global_rounds + 1), normalised by their sum; FLiP runs global_rounds + 1
// rounds, so R is the number of rounds run). It is GaussianWeights over
// 1..R with the mean shifted by one.
func RoundWeights(R int, mean, std float64) ([]float64, error) {
	if R < 1 {
		return nil, fmt.Errorf("GPA over %d rounds: set promptsrc.gpa_rounds or federation.rounds", R)
	}
	return GaussianWeights(R, mean+1, std)
}

// roundsGPA is FLiP's federated Gaussian prompt aggregation
// (PromptSRCCLIP.gauss_avg, called by the server after each round's
// aggregation): FedAvg of the uploads avg_r, then the global tensors
// become S_r = S_{r−1} + g_r·avg_r, S_0 = g_0·avg_0 — the running sum, not
// renormalised over the rounds so far — which the clients receive, train
// from and are evaluated with. Its state is the FedAvg's (the global
// tensors are S_r), so a resumed run continues the sum.
type roundsGPA struct {
	*strategy.FedAvg
	w []float64
}

func newRoundsGPA(shared federation.Filter, init tensor.Named, w []float64) *roundsGPA {
	g := tensor.Named{}
	for name, t := range init {
		if shared.Match(name) {
			g[name] = t.Clone()
		}
	}
	return &roundsGPA{FedAvg: &strategy.FedAvg{Shared: shared, Initial: g}, w: w}
}

// Name implements federation.Strategy.
func (s *roundsGPA) Name() string { return "fedavg-gpa-rounds" }

// Aggregate implements federation.Strategy: FedAvg, then the running
// weighted sum.
func (s *roundsGPA) Aggregate(round int, results []federation.FitResult, failures []federation.Failure) error {
	if round < 0 || round >= len(s.w) {
		return fmt.Errorf("%s round %d: GPA weighs %d rounds (promptsrc.gpa_rounds, or federation.rounds)", s.Name(), round, len(s.w))
	}
	prev := s.Global()
	if err := s.FedAvg.Aggregate(round, results, failures); err != nil {
		return err
	}
	st, err := s.runningSum(round, prev)
	if err == nil {
		err = s.LoadState(st)
	}
	if err != nil {
		return fmt.Errorf("%s round %d: %w", s.Name(), round, err)
	}
	return nil
}

// runningSum is the state holding prev + w[round]·(the FedAvg just
// computed), or w[0]·avg in round 0.
func (s *roundsGPA) runningSum(round int, prev tensor.Named) (tensor.Named, error) {
	st := tensor.Named{}
	for name, a := range s.Global() {
		p := prev[name]
		if round > 0 && (p == nil || len(p.Data) != len(a.Data)) {
			return nil, fmt.Errorf("the previous global tensors lack %q or its shape %v", name, a.Shape)
		}
		t := tensor.New(a.Shape...)
		for i, v := range a.Data {
			sum := s.w[round] * float64(v)
			if round > 0 {
				sum += float64(p.Data[i])
			}
			t.Data[i] = float32(sum)
		}
		st["global/"+name] = t
	}
	return st, nil
}
