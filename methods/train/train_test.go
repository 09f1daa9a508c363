package train

import (
	"testing"

	"github.com/pfedmma/pfedmma/optim"
)

// TestScheduleIndexedByEpoch: the learning-rate schedule advances once per
// local epoch across rounds (global epoch = round·E + epoch).
func TestScheduleIndexedByEpoch(t *testing.T) {
	c := optim.Cosine{Base: 0.1, Total: 6}
	o := Options{Epochs: 2, LR: 0.1, Schedule: c}
	for round := 0; round < 3; round++ {
		for epoch := 0; epoch < 2; epoch++ {
			if got, want := o.Rate(round, epoch), c.LR(round*2+epoch); got != want {
				t.Fatalf("Rate(round %d, epoch %d) = %v, want %v", round, epoch, got, want)
			}
		}
	}
	if o.Rate(0, 0) <= o.Rate(2, 1) {
		t.Fatalf("cosine schedule does not decay: %v then %v", o.Rate(0, 0), o.Rate(2, 1))
	}
	if (Options{LR: 0.3}).Rate(5, 1) != 0.3 {
		t.Fatal("constant schedule")
	}
}
