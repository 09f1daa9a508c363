package train

import (
	"testing"

	"github.com/pfedmma/pfedmma/optim"
)

// TestOwn: a method's own settings replace the run's where set (a schedule
// keeps its shape, rescaled to the new peak) and zero keeps the run's.
func TestOwn(t *testing.T) {
	run := Options{Epochs: 3, Batch: 8, Optimizer: "sgd", LR: 0.05, Momentum: 0.9, WD: 5e-4,
		Schedule: optim.Cosine{Base: 0.05, Total: 10}}
	if got := run.Own("", 0, 0, 0); got != run {
		t.Fatalf("nothing set changed the options: %+v", got)
	}
	got := run.Own("adamw", 2e-4, 0.01, 1)
	if got.Optimizer != "adamw" || got.LR != 2e-4 || got.WD != 0.01 || got.Epochs != 1 || got.Momentum != 0.9 || got.Batch != 8 {
		t.Fatalf("own settings not applied: %+v", got)
	}
	for e := range 10 {
		want := run.Schedule.LR(e) * 2e-4 / 0.05
		if d := got.Schedule.LR(e) - want; d > 1e-12 || d < -1e-12 {
			t.Fatalf("epoch %d: rate %v, want the run's schedule rescaled: %v", e, got.Schedule.LR(e), want)
		}
	}
	if got.Rate(0, 0) != 2e-4 || run.Rate(0, 0) != 0.05 {
		t.Fatalf("peak rates %v and %v, want 2e-4 and 0.05", got.Rate(0, 0), run.Rate(0, 0))
	}
}
