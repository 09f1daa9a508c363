package experiment

import (
	"testing"

	"github.com/pfedmma/pfedmma/methods/dpfpl"
)

// TestDPFPLReportsEpsilon: a DP-FPL run records the privacy spent after
// every evaluated round — the global mechanism's ε (one Gaussian a round)
// and the local one's (one a batch, larger) — in metrics.jsonl's records,
// and the final ε in the summary.
func TestDPFPLReportsEpsilon(t *testing.T) {
	res := runPreset(t, "world-compare", "methods=[dpfpl]", "dataset.num_classes=8", "dataset.shots=4",
		"federation.clients=2", "federation.rounds=2", "federation.local_epochs=1", "federation.eval_every=1", "batch_size=4")
	s := &dpfpl.Settings{Epsilon: 0.4, Delta: 1e-5, CalibrationRounds: 5} // world-compare's dpfpl privacy settings
	var last float64
	n := 0
	for _, r := range res.Records {
		if r.Method != "dpfpl" {
			continue
		}
		want, err := dpfpl.GaussianEpsilon(s.Sigma(), r.Round+1, s.Delta)
		if err != nil {
			t.Fatal(err)
		}
		if g := r.Mean["dp_epsilon_global"]; g != want {
			t.Errorf("round %d: dp_epsilon_global %v, want %v", r.Round, g, want)
		}
		if l := r.Mean["dp_epsilon_local"]; !(l > want) {
			t.Errorf("round %d: dp_epsilon_local %v, want above the global %v (more applications)", r.Round, l, want)
		}
		if !(want > last) {
			t.Errorf("round %d: ε %v did not grow from %v", r.Round, want, last)
		}
		last = want
		n++
	}
	if n != 2 {
		t.Fatalf("%d dpfpl records, want 2", n)
	}
	sum, ok := res.Summary.Get("dpfpl")
	if !ok || sum["dp_epsilon_global"] != last || !(sum["dp_epsilon_local"] > 0) {
		t.Errorf("summary %v: want dp_epsilon_global %v and a dp_epsilon_local", sum, last)
	}
}
