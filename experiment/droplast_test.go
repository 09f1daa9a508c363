package experiment

import (
	"path/filepath"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/config"
)

// TestDropLastReachesTraining: train.drop_last reaches every method's
// training options (train.Options.DropLast), default false, and enters the
// run's fingerprint only when set (a run without the key is the same run).
func TestDropLastReachesTraining(t *testing.T) {
	dir, err := assets.DefaultModelDir()
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, assets.ModelFile)
	e := config.Default()
	o, err := FromConfig(e, model, 1, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if o.Train.DropLast {
		t.Error("train.drop_last is on by default")
	}
	before := e.Fingerprint()
	if err := e.Set("train.drop_last", "true"); err != nil {
		t.Fatal(err)
	}
	if o, err = FromConfig(e, model, 1, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if !o.Train.DropLast {
		t.Error("train.drop_last=true does not reach the training options")
	}
	if e.Fingerprint() == before {
		t.Error("train.drop_last=true leaves the fingerprint unchanged")
	}
}

// TestPartialBatchPresets: which world presets' clients hold a partial
// last batch (at least one full batch of batch_size and a remainder), so
// that train.drop_last true would move their results. The default job,
// world-compare (and -shared), world-dg and world-lodo deal every client a
// whole number of batches (base-to-novel: 2 classes × 16 shots = one batch
// of 32; the domain folds 640 = 20 batches) and would not move;
// world-deploy, world-dirichlet, world-domains and fashion-mnist would — the reason the
// default stays false (README, "Method choices").
func TestPartialBatchPresets(t *testing.T) {
	dir, err := assets.DefaultModelDir()
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, assets.ModelFile)
	for _, tc := range []struct {
		preset, heldOut string
		partial         bool
	}{
		{config.DefaultPreset, "", false}, {"world-compare", "", false}, {"world-compare-shared", "", false},
		{"world-dg", "", false}, {"world-lodo", "photo", false}, {"world-lodo", "painting", false},
		{"world-deploy", "", true}, {"world-dirichlet", "", true}, {"world-domains", "", true},
		{"fashion-mnist", "", true}, // dataset-fashion-mnist (make test installs it)
	} {
		e, err := config.Preset(tc.preset)
		if err != nil {
			t.Fatal(err)
		}
		if tc.heldOut != "" {
			e.Protocol.HeldOut = tc.heldOut
		}
		o, err := FromConfig(e, model, e.Seed, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		s, err := newSetup(o, []string{ZeroShot})
		if err != nil {
			t.Fatalf("%s: %v", tc.preset, err)
		}
		var sizes []int
		partial := false
		for _, c := range s.task.Clients {
			n := len(c.Train)
			sizes = append(sizes, n)
			partial = partial || n >= e.BatchSize && n%e.BatchSize != 0
		}
		t.Logf("%s %s: batch %d, client sizes %v", tc.preset, tc.heldOut, e.BatchSize, sizes)
		if partial != tc.partial {
			t.Errorf("%s %s: a client holds a partial last batch: %v, want %v (sizes %v, batch %d)", tc.preset, tc.heldOut, partial, tc.partial, sizes, e.BatchSize)
		}
	}
}
