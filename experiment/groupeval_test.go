package experiment

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/protocol"
)

// groupRun is what a run's evaluations produced: every client's logits per
// evaluation set, in call order, and every round's per-client metrics.
type groupRun struct {
	logits  map[int][][][]float32 // client → evaluation → set → logits
	metrics []map[int]federation.Metrics
}

func runEvaluations(t *testing.T, alone bool, sets ...string) groupRun {
	t.Helper()
	e, err := config.Preset(config.DefaultPreset)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range append([]string{"methods=[pfedmma]", "federation.rounds=2"}, sets...) {
		path, value, err := config.ParseSet(kv)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Set(path, value); err != nil {
			t.Fatal(err)
		}
	}
	model, err := assets.DefaultModelDir()
	if err != nil {
		t.Fatal(err)
	}
	o, err := FromConfig(e, model, e.Seed, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	o.Plots, o.SaveAdapters, o.EvaluateAlone = false, false, alone
	if !alone {
		// the grouped path must be the one that runs
		f, err := PrepareFederated(context.Background(), o, -1)
		if err != nil {
			t.Fatal(err)
		}
		ge, ok := f.Client(0).(federation.GroupEvaluator)
		f.Close()
		if !ok || ge.EvalGroup() == nil {
			t.Fatalf("pfedmma's clients (%v) have no evaluation group", sets)
		}
	}
	run := groupRun{logits: map[int][][][]float32{}}
	o.OnEvaluate = func(_ string, c *protocol.ClientTask, logits [][]float32) {
		cp := make([][]float32, len(logits))
		for i, l := range logits {
			cp[i] = append([]float32(nil), l...)
		}
		run.logits[c.ID] = append(run.logits[c.ID], cp)
	}
	o.OnRound = func(_ string, r federation.RoundReport) { run.metrics = append(run.metrics, r.Eval) }
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	return run
}

// TestGroupEvaluationBitIdentical: pFedMMA's clients evaluated together
// (block ℓ's frozen part run once per batch for all of them) score every
// image exactly as each client evaluated alone — logits bit for bit and
// metrics — with the adapters in the last block only (ℓ = L, pruned) and
// in the last two (ℓ = L−1), in float32 and in bfloat16.
func TestGroupEvaluationBitIdentical(t *testing.T) {
	for _, c := range []struct {
		name string
		sets []string
	}{
		{"last block", []string{"pfedmma.start=-1"}},
		{"last two blocks", []string{"pfedmma.start=-2"}},
		{"last two blocks bf16", []string{"pfedmma.start=-2", "engine.precision=bf16"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			alone := runEvaluations(t, true, c.sets...)
			group := runEvaluations(t, false, c.sets...)
			if len(alone.logits) < 2 || len(group.logits) != len(alone.logits) {
				t.Fatalf("%d clients evaluated together, %d alone (want the same, ≥ 2)", len(group.logits), len(alone.logits))
			}
			for id, evs := range alone.logits {
				gevs := group.logits[id]
				if len(gevs) != len(evs) || len(evs) == 0 {
					t.Fatalf("client %d: %d evaluations together, %d alone", id, len(gevs), len(evs))
				}
				for k := range evs {
					if err := sameLogits(gevs[k], evs[k]); err != nil {
						t.Fatalf("client %d evaluation %d: %v", id, k, err)
					}
				}
			}
			if len(group.metrics) != len(alone.metrics) || len(alone.metrics) == 0 {
				t.Fatalf("%d rounds evaluated together, %d alone", len(group.metrics), len(alone.metrics))
			}
			for r := range alone.metrics {
				if fmt.Sprint(group.metrics[r]) != fmt.Sprint(alone.metrics[r]) {
					t.Errorf("round %d metrics together %v, alone %v", r, group.metrics[r], alone.metrics[r])
				}
			}
		})
	}
}

// sameLogits reports the first difference in bits between two clients'
// per-set logits.
func sameLogits(a, b [][]float32) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d sets, want %d", len(a), len(b))
	}
	for s := range b {
		if len(a[s]) != len(b[s]) {
			return fmt.Errorf("set %d: %d logits, want %d", s, len(a[s]), len(b[s]))
		}
		for i := range b[s] {
			if math.Float32bits(a[s][i]) != math.Float32bits(b[s][i]) {
				return fmt.Errorf("set %d logit %d: %v together, %v alone", s, i, a[s][i], b[s][i])
			}
		}
	}
	return nil
}
