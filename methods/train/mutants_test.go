package train

import (
	"context"
	"math"
	"testing"

	"github.com/pfedmma/pfedmma/optim"
)

// scoredTrainable returns as loss its batch's size and counts half of each
// batch (rounded down) as correct.
type scoredTrainable struct{ p, g []float32 }

func (r *scoredTrainable) Params() []optim.Param {
	return []optim.Param{{Name: "w", Value: r.p, Grad: r.g}}
}

func (r *scoredTrainable) Step(_ context.Context, b Batch) (float64, int, error) {
	return float64(len(b.Items)), len(b.Items) / 2, nil
}

// TestRunMetrics: Run reports the mean loss over steps and the accuracy
// 100·correct/seen over every example: 10 examples in batches 4, 4, 2 give
// losses 4, 4, 2 (mean 10/3) and 2+2+1 = 5 correct of 10 (50%).
func TestRunMetrics(t *testing.T) {
	l, err := NewLoop(Options{Epochs: 1, Batch: 4, LR: 0.1}, 10, 1, 2, "client")
	if err != nil {
		t.Fatal(err)
	}
	m, err := l.Run(context.Background(), 0, &scoredTrainable{p: []float32{0}, g: []float32{0}})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(m["loss"]-10.0/3) > 1e-12 || m["train_acc"] != 50 {
		t.Fatalf("metrics %v, want loss 3.333… and train_acc 50", m)
	}
}

// TestOwnScheduleWithoutRunRate: a run without a base rate (LR 0) gives no
// ratio to rescale its schedule by, so a method's own lr keeps the schedule
// as it is (finite rates), rather than scaling it by lr/0.
func TestOwnScheduleWithoutRunRate(t *testing.T) {
	run := Options{Epochs: 2, Batch: 8, Schedule: optim.Cosine{Base: 0.05, Total: 10}}
	got := run.Own("", 0.1, 0, 0)
	for e := range 10 {
		if r, want := got.Schedule.LR(e), run.Schedule.LR(e); r != want {
			t.Fatalf("epoch %d: rate %v, want the run's schedule unchanged: %v", e, r, want)
		}
	}
}

// TestRunResetOptimizer: with reset_optimizer a round trains with a fresh
// optimizer (not the loop's previous one) and reports its metrics.
func TestRunResetOptimizer(t *testing.T) {
	l, err := NewLoop(Options{Epochs: 1, Batch: 4, LR: 0.1, Momentum: 0.9, ResetOptimizer: true}, 10, 1, 2, "client")
	if err != nil {
		t.Fatal(err)
	}
	before := l.Opt
	m, err := l.Run(context.Background(), 0, &scoredTrainable{p: []float32{0}, g: []float32{0}})
	if err != nil {
		t.Fatal(err)
	}
	if l.Opt == before || math.Abs(m["loss"]-10.0/3) > 1e-12 {
		t.Errorf("optimizer replaced: %v, metrics %v; want a fresh optimizer and loss 3.333…", l.Opt != before, m)
	}
}
