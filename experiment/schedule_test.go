package experiment

import (
	"testing"

	"github.com/pfedmma/pfedmma/optim"
)

// TestScheduleIndexedByEpoch: the learning-rate schedule advances once per
// local epoch across rounds (global epoch = round·E + epoch).
func TestScheduleIndexedByEpoch(t *testing.T) {
	c := optim.Cosine{Base: 0.1, Total: 6}
	o := TrainOptions{Epochs: 2, LR: 0.1, Schedule: c}
	for round := 0; round < 3; round++ {
		for epoch := 0; epoch < 2; epoch++ {
			if got, want := o.lr(round, epoch), c.LR(round*2+epoch); got != want {
				t.Fatalf("lr(round %d, epoch %d) = %v, want %v", round, epoch, got, want)
			}
		}
	}
	if o.lr(0, 0) <= o.lr(2, 1) {
		t.Fatalf("cosine schedule does not decay: %v then %v", o.lr(0, 0), o.lr(2, 1))
	}
	if (TrainOptions{LR: 0.3}).lr(5, 1) != 0.3 {
		t.Fatal("constant schedule")
	}
}
