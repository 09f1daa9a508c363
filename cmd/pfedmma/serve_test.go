package main

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/tensor"
)

// countingProxy is a client that trains nothing and records the rounds it
// is evaluated after.
type countingProxy struct {
	id    int
	mu    *sync.Mutex
	evals *[]int
}

func (p countingProxy) ID() int          { return p.id }
func (p countingProxy) NumExamples() int { return 1 }
func (p countingProxy) Fit(_ context.Context, ins federation.FitIns) (federation.FitRes, error) {
	return federation.FitRes{Params: ins.Params, NumExamples: 1}, nil
}
func (p countingProxy) Evaluate(_ context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.id == 0 {
		*p.evals = append(*p.evals, ins.Round)
	}
	return federation.EvaluateRes{Metrics: map[string]float64{"acc": 1}}, nil
}

// TestServeEvaluatesAsRun (issue 17, defect 6): `serve` evaluates after
// the rounds `run` evaluates after — federation.eval_every 0 is the last
// round only, k every k-th round and the last.
func TestServeEvaluatesAsRun(t *testing.T) {
	for _, tc := range []struct {
		every string
		want  []int
	}{{"0", []int{4}}, {"2", []int{1, 3, 4}}, {"1", []int{0, 1, 2, 3, 4}}} {
		e, err := config.Compose(config.Sources{Preset: config.DefaultPreset,
			Sets: []string{"federation.rounds=5", "federation.eval_every=" + tc.every, "federation.fraction=1"}})
		if err != nil {
			t.Fatal(err)
		}
		o, err := experiment.FromConfig(e, "../../testdata/clip-tiny/openai.safetensors", e.Seed, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var evals []int
		st := &strategy.FedAvg{Initial: tensor.Named{"w": tensor.New(2)}}
		co := serveCoordinator(o, st, 2, 1, time.Minute, "fp")
		co.Logger = slog.New(slog.DiscardHandler)
		co.Proxies = []federation.ClientProxy{countingProxy{0, &mu, &evals}, countingProxy{1, &mu, &evals}}
		if _, err := co.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(evals, tc.want) {
			t.Errorf("eval_every %s: serve evaluates after rounds %v, run after %v", tc.every, evals, tc.want)
		}
	}
}
