package experiment

import (
	"math"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods/dpfpl"
)

// TestDPFPLReportsEpsilon: a DP-FPL run of world-compare's privacy
// settings (ε 0.4 calibrated to T = 5 at δ 1e-5, batch 32, SGD momentum
// 0.9 reset each round) at 3 local epochs of one batch each — every client
// holds at most 16 images; world-compare's recipe runs one (dpfpl.local_epochs),
// this job is the one its code's recipe ran — records after every round the privacy
// of every Gaussian released so far, counted by hand here:
//   - local: gU and gV at every local step, 2·3 releases a round at
//     multiplier σ (the code's sensitivity C/B) or σ/64 (2C, what clipping
//     the batch mean bounds one example's effect by, over C/B with B = 32);
//   - global: the server's one Gaussian a round, on uploads that carry 3
//     momentum steps: a change Δ of each step's gradient moves the upload by
//     η·((1+0.9+0.81) + (1+0.9) + 1) = 5.61·η·Δ, multiplier σ/5.61 (σ/(64·5.61)
//     at 2C);
//   - total: both composed (the published global context depends on the
//     local context, which carries the data through the local releases).
//
// The code before counted one release a step and σ for the server (README:
// 0.81 local, 0.45 global after 5 rounds; by this count 1.19 and 2.96).
func TestDPFPLReportsEpsilon(t *testing.T) {
	e, err := config.Preset("world-compare")
	if err != nil {
		t.Fatal(err)
	}
	if o := e.Optimizer; o.Momentum != 0.9 || !o.ResetEachRound || o.Schedule != config.ScheduleConstant || o.Name != config.OptimizerSGD {
		t.Fatalf("world-compare's optimizer %+v: the hand count assumes SGD, momentum 0.9, reset each round, constant lr", o)
	}
	res := runPreset(t, "world-compare", "methods=[dpfpl]", "dataset.num_classes=8", "dataset.shots=4",
		"federation.clients=2", "federation.rounds=2", "federation.local_epochs=3", "dpfpl.local_epochs=3", "federation.eval_every=1", "batch_size=32")
	s := &dpfpl.Settings{Epsilon: 0.4, Delta: 1e-5, CalibrationRounds: 5} // world-compare's dpfpl privacy settings
	sigma := s.Sigma()
	eps := func(z float64, n int) float64 {
		var a dpfpl.Accountant
		a.Spend(1, z, n)
		v, err := a.Epsilon(s.Delta)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// both ledgers composed: n Gaussians at z, m at z2
	eps2 := func(z float64, n int, z2 float64, m int) float64 {
		var a dpfpl.Accountant
		a.Spend(1, z, n)
		a.Spend(1, z2, m)
		v, err := a.Epsilon(s.Delta)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	var want map[string]float64
	n := 0
	for _, r := range res.Records {
		if r.Method != "dpfpl" {
			continue
		}
		k := r.Round + 1
		want = map[string]float64{
			"dp_epsilon_local":             eps(sigma, 2*3*k),
			"dp_epsilon_global":            eps(sigma/5.61, k),
			"dp_epsilon_local_batch_clip":  eps(sigma/64, 2*3*k),
			"dp_epsilon_global_batch_clip": eps(sigma/(64*5.61), k),
			"dp_epsilon_total":             eps2(sigma, 2*3*k, sigma/5.61, k),
			"dp_epsilon_total_batch_clip":  eps2(sigma/64, 2*3*k, sigma/(64*5.61), k),
		}
		for name, w := range want {
			if g := r.Mean[name]; math.Abs(g-w) > 1e-6*w {
				t.Errorf("round %d: %s %v, want %v", r.Round, name, g, w)
			}
		}
		n++
	}
	if n != 2 {
		t.Fatalf("%d dpfpl records, want 2", n)
	}
	sum, ok := res.Summary.Get("dpfpl")
	if !ok {
		t.Fatal("no dpfpl summary")
	}
	for name, w := range want {
		if g := sum[name]; math.Abs(g-w) > 1e-6*w {
			t.Errorf("summary %s %v, want %v", name, g, w)
		}
	}
}
