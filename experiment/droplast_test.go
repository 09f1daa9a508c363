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
