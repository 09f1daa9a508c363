package experiment

import (
	"context"
	"math"
	"os"
	"sync"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/config"
)

// runPreset runs a preset with the embedded model, after applying the
// --set style overrides.
func runPreset(t *testing.T, name string, sets ...string) *Result {
	t.Helper()
	res, err := runPresetIn(t.TempDir(), name, sets...)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// runPresetIn is runPreset writing into dir, returning the error.
func runPresetIn(dir, name string, sets ...string) (*Result, error) {
	e, err := config.Preset(name)
	if err != nil {
		return nil, err
	}
	for _, kv := range sets {
		path, value, err := config.ParseSet(kv)
		if err != nil {
			return nil, err
		}
		if err := e.Set(path, value); err != nil {
			return nil, err
		}
	}
	model, err := assets.DefaultModelDir()
	if err != nil {
		return nil, err
	}
	o, err := FromConfig(e, model, e.Seed, dir)
	if err != nil {
		return nil, err
	}
	o.Plots, o.SaveAdapters = false, false
	return Run(context.Background(), o)
}

// sharedRun is a preset's run made once per test binary and shared by the
// tests that check different things about it (they read its Result only).
type sharedRun struct {
	once sync.Once
	res  *Result
	err  error
}

// get runs (once) preset name with sets; its folder is removed once the
// run is over.
func (s *sharedRun) get(t *testing.T, name string, sets ...string) *Result {
	t.Helper()
	s.once.Do(func() {
		dir, err := os.MkdirTemp("", "experiment-shared-")
		if err != nil {
			s.err = err
			return
		}
		defer os.RemoveAll(dir)
		s.res, s.err = runPresetIn(dir, name, sets...)
	})
	if s.err != nil {
		t.Fatalf("preset %s %v: %v", name, sets, s.err)
	}
	return s.res
}

// defaultJob is the default world job in float32, shared by
// TestDefaultJobQualities and TestBF16DefaultJob.
var defaultJob sharedRun

// TestDefaultJobQualities guards the measured qualities of the default job
// (README, "The default job") at generous thresholds: zero-shot transfer to
// novel compositions far above chance, pFedMMA's local accuracy clearly above
// zero-shot, its novel accuracy close to zero-shot's.
func TestDefaultJobQualities(t *testing.T) {
	res := defaultJob.get(t, config.DefaultPreset)
	zs, _ := res.Summary.Get(ZeroShot)
	pf, _ := res.Summary.Get(PFedMMA)
	t.Logf("zero-shot %v\npFedMMA %v", zs, pf)
	const novelClasses = 20 // 40 classes, half novel
	if chance := 100.0 / novelClasses; zs["novel"] < 5*chance {
		t.Errorf("zero-shot novel accuracy %.1f%% is not well above chance (%.1f%%)", zs["novel"], chance)
	}
	if pf["local"] < zs["local"]+5 {
		t.Errorf("pFedMMA local %.1f%% not clearly above zero-shot %.1f%%", pf["local"], zs["local"])
	}
	if math.Abs(pf["novel"]-zs["novel"]) > 6 {
		t.Errorf("pFedMMA novel %.1f%% strays from zero-shot %.1f%%", pf["novel"], zs["novel"])
	}
	if pf["hm"] < zs["hm"]-1 {
		t.Errorf("pFedMMA HM %.1f below zero-shot %.1f", pf["hm"], zs["hm"])
	}
}

// TestDomainStylesLowerZeroShot: the rendering styles are real domain
// shifts — zero-shot accuracy differs clearly between them.
func TestDomainStylesLowerZeroShot(t *testing.T) {
	res := runPreset(t, "world-domains")
	zs, _ := res.Summary.Get(ZeroShot)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, d := range []string{"photo", "clipart", "sketch", "painting"} {
		v, ok := zs[d]
		if !ok {
			t.Fatalf("no zero-shot accuracy for domain %s: %v", d, zs)
		}
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	t.Logf("zero-shot per domain %v", zs)
	if hi-lo < 5 {
		t.Errorf("zero-shot accuracy varies only %.1f points across styles", hi-lo)
	}
}

// TestFashionMNISTPreset: the shipped model saw Fashion-MNIST photographs
// with templated captions in pretraining, so the protocol.Dirichlet protocol runs on
// real clothing images: zero-shot far above chance (10 classes), pFedMMA's
// personalised accuracy above zero-shot. Needs Debian's
// dataset-fashion-mnist (installed by `make test`).
func TestFashionMNISTPreset(t *testing.T) {
	if _, err := os.Stat("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"); err != nil {
		t.Fatalf("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist, or run `make test`): %v", err)
	}
	res := runPreset(t, "fashion-mnist")
	zs, _ := res.Summary.Get(ZeroShot)
	pf, _ := res.Summary.Get(PFedMMA)
	t.Logf("zero-shot %v, pFedMMA %v", zs, pf)
	if zs["acc"] < 30 {
		t.Errorf("zero-shot accuracy %.1f%% on Fashion-MNIST is not well above chance (10%%)", zs["acc"])
	}
	if pf["acc"] < zs["acc"] {
		t.Errorf("pFedMMA accuracy %.1f%% below zero-shot %.1f%%", pf["acc"], zs["acc"])
	}
}

// TestBF16CacheClose: storing cached prefixes as bfloat16 halves their
// memory and keeps every accuracy of a short default job within a point of
// the exact float32 cache.
func TestBF16CacheClose(t *testing.T) {
	exact := runPreset(t, config.DefaultPreset, "federation.rounds=2")
	half := runPreset(t, config.DefaultPreset, "federation.rounds=2", "cache.dtype=bfloat16")
	sameSummaries(t, "float32 cache, then bfloat16", exact, half, 1)
}
