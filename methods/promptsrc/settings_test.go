package promptsrc

import (
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/train"
)

// TestOwnRecipeRefused: a negative lr or local_epochs (and local_epochs
// past config.MaxOwnLocalEpochs) is refused naming the key; the default
// section has neither set (the run's optimizer.lr and local epochs).
func TestOwnRecipeRefused(t *testing.T) {
	if s := (Method{}).DefaultConfig().(*Settings); s.LR != 0 || s.LocalEpochs != 0 {
		t.Fatalf("default section lr %v, local_epochs %d: want 0 (the run's)", s.LR, s.LocalEpochs)
	}
	for _, set := range []string{"promptsrc.lr=-0.1", "promptsrc.local_epochs=-1", "promptsrc.local_epochs=1000000"} {
		_, err := config.Compose(config.Sources{Sets: []string{"methods=[promptsrc]", set}})
		if key, _, _ := strings.Cut(set, "="); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("--set %s: %v, want an error naming %s", set, err, key)
		}
	}
}

// TestOwnRecipeSpec: the client Spec trains with the section's lr and
// local_epochs where set and the run's where 0; what the loop does with
// the Spec's options is experiment's TestOwnRecipeKeys (promptsrc).
func TestOwnRecipeSpec(t *testing.T) {
	run := train.Options{Optimizer: "sgd", LR: 0.05, Epochs: 3, Batch: 4, Momentum: 0.9}
	for _, tc := range []struct {
		lr         float64
		epochs     int
		wantLR     float64
		wantEpochs int
	}{{0, 0, 0.05, 3}, {0.2, 0, 0.2, 3}, {0, 1, 0.05, 1}, {0.2, 5, 0.2, 5}} {
		s := Method{}.DefaultConfig().(*Settings)
		s.LR, s.LocalEpochs = tc.lr, tc.epochs
		sp, err := buildSpec(&methods.Env{Train: run}, s)
		if err != nil {
			t.Fatal(err)
		}
		if sp.Train == nil {
			t.Fatalf("lr %v, local_epochs %d: the Spec has no training options", tc.lr, tc.epochs)
		}
		want := run
		want.LR, want.Epochs = tc.wantLR, tc.wantEpochs
		if got := *sp.Train; got.LR != want.LR || got.Epochs != want.Epochs || got.Optimizer != want.Optimizer ||
			got.Batch != want.Batch || got.Momentum != want.Momentum {
			t.Errorf("lr %v, local_epochs %d: Spec trains with %+v, want %+v", tc.lr, tc.epochs, got, want)
		}
	}
}
