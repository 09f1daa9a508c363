package experiment

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/internal/memlimit"
	"github.com/pfedmma/pfedmma/internal/testmodel"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/protocol"

	"github.com/pfedmma/pfedmma/report"
	_ "github.com/pfedmma/pfedmma/world" // registers the "world" dataset
)

// smallModel writes a small random CLIP and its vocabulary into a
// temporary model folder.
func smallModel(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := testmodel.Write(dir, 16, 7); err != nil {
		t.Fatal(err)
	}
	return dir
}

// sameSummaries compares the methods' metrics of two runs: exactly when tol
// is 0, else within tol points.
func sameSummaries(t *testing.T, what string, a, b *Result, tol float64) {
	t.Helper()
	for _, m := range []string{ZeroShot, PFedMMA} {
		ma, okA := a.Summary.Get(m)
		mb, okB := b.Summary.Get(m)
		if okA != okB {
			t.Fatalf("%s: method %s in only one run", what, m)
		}
		for k, v := range ma {
			if d := mb[k] - v; d > tol || d < -tol {
				t.Fatalf("%s: %s %s is %v, then %v", what, m, k, v, mb[k])
			}
		}
	}
}

func smallOptions(t *testing.T, model string) Options {
	return Options{
		ModelPath: model, Dataset: "world",
		DatasetOptions: dataset.Options{NumClasses: 8, TrainPerClass: 8, TestPerClass: 6, ImageSize: 32},
		Protocol:       protocol.Options{Name: protocol.BaseToNovel, Clients: 2},
		Methods:        []string{ZeroShot, PFedMMA},
		Sections:       mmaSections(2, 8, 0.1),
		Train:          train.Options{Epochs: 2, Batch: 8, LR: 0.05, Momentum: 0.9, WD: 5e-4},
		Rounds:         3, Fraction: 1, Seed: 3, OutDir: t.TempDir(), SaveAdapters: true, Plots: true,
	}
}

// TestRunEndToEnd: pFedMMA's local accuracy rises above zero-shot on a
// small random model, and every output file is written.
func TestRunEndToEnd(t *testing.T) {
	o := smallOptions(t, smallModel(t))
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	zs, ok1 := res.Summary.Get(ZeroShot)
	pf, ok2 := res.Summary.Get(PFedMMA)
	if !ok1 || !ok2 {
		t.Fatalf("summary lacks a method: %+v", res.Summary.Methods)
	}
	t.Logf("zero-shot %v\npFedMMA %v", zs, pf)
	if pf["local"] < zs["local"]+15 {
		t.Fatalf("pFedMMA local accuracy %.1f%% did not rise clearly above zero-shot %.1f%%", pf["local"], zs["local"])
	}
	var firstLocal float64 = -1
	for _, r := range res.Records {
		if r.Method == PFedMMA && firstLocal < 0 {
			firstLocal = r.Mean["local"]
		}
	}
	if pf["local"] <= firstLocal-1e-9 && pf["local"] < 100 {
		t.Fatalf("local accuracy fell from %.1f (round 0) to %.1f", firstLocal, pf["local"])
	}
	for _, f := range []string{"summary.json", "report.md", "metrics.jsonl", "metrics.csv", "curves.png", "final.png",
		"sites/pfedmma/client_000.safetensors", "sites/pfedmma/client_001.safetensors", "global/pfedmma.safetensors"} {
		if st, err := os.Stat(filepath.Join(o.OutDir, f)); err != nil || st.Size() == 0 {
			t.Errorf("output %s missing or empty: %v", f, err)
		}
	}
	sum, err := report.ReadSummary(filepath.Join(o.OutDir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Protocol != protocol.BaseToNovel {
		t.Fatalf("summary protocol %q", sum.Protocol)
	}
}

// TestResumeEqualsUninterrupted: a run stopped after round 2 and resumed
// ends with bit-identical adapters and metrics.
func TestResumeEqualsUninterrupted(t *testing.T) {
	model := smallModel(t)
	full := smallOptions(t, model)
	full.Methods = []string{PFedMMA}
	if _, err := Run(context.Background(), full); err != nil {
		t.Fatal(err)
	}
	part := smallOptions(t, model)
	part.Methods = []string{PFedMMA}
	part.Rounds = 2
	if _, err := Run(context.Background(), part); err != nil {
		t.Fatal(err)
	}
	part.Rounds = 3
	part.Resume = true
	res, err := Run(context.Background(), part)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.Records); n != 3 {
		t.Fatalf("resumed run has %d round records, want 3", n)
	}
	for _, f := range []string{"sites/pfedmma/client_000.safetensors", "sites/pfedmma/client_001.safetensors", "global/pfedmma.safetensors", "summary.json"} {
		a, err1 := os.ReadFile(filepath.Join(full.OutDir, f))
		b, err2 := os.ReadFile(filepath.Join(part.OutDir, f))
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if f == "summary.json" {
			// timings differ; compare the methods' metrics
			sa, _ := report.ReadSummary(filepath.Join(full.OutDir, f))
			sb, _ := report.ReadSummary(filepath.Join(part.OutDir, f))
			ma, _ := sa.Get(PFedMMA)
			mb, _ := sb.Get(PFedMMA)
			for k, v := range ma {
				if mb[k] != v {
					t.Fatalf("summary %s: resumed %v, uninterrupted %v", k, mb[k], v)
				}
			}
			continue
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("%s differs between the resumed and the uninterrupted run", f)
		}
	}
}

// TestCacheOnOffIdentical: with augmentation off, the prefix cache changes
// nothing.
func TestCacheOnOffIdentical(t *testing.T) {
	model := smallModel(t)
	on := smallOptions(t, model)
	on.Rounds = 2
	off := smallOptions(t, model)
	off.Rounds = 2
	off.NoCache = true
	ra, err := Run(context.Background(), on)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := Run(context.Background(), off)
	if err != nil {
		t.Fatal(err)
	}
	sameSummaries(t, "cache on, then off", ra, rb, 0)
	a, _ := os.ReadFile(filepath.Join(on.OutDir, "sites/pfedmma/client_001.safetensors"))
	b, _ := os.ReadFile(filepath.Join(off.OutDir, "sites/pfedmma/client_001.safetensors"))
	if !bytes.Equal(a, b) {
		t.Fatal("client adapters differ with the cache on and off")
	}
}

// TestAugmentModes: cached augmented views and online augmentation train,
// and each is reproducible for a seed.
func TestAugmentModes(t *testing.T) {
	model := smallModel(t)
	for _, aug := range []string{"views:2", "online"} {
		t.Run(aug, func(t *testing.T) {
			var first *Result
			for rep := 0; rep < 2; rep++ {
				o := smallOptions(t, model)
				o.Methods = []string{PFedMMA}
				o.Rounds = 1
				o.Augment = aug
				res, err := Run(context.Background(), o)
				if err != nil {
					t.Fatal(err)
				}
				m, ok := res.Summary.Get(PFedMMA)
				if !ok || m["local"] <= 0 {
					t.Fatalf("no pFedMMA result: %v", res.Summary.Methods)
				}
				if rep == 0 {
					first = res
					continue
				}
				sameSummaries(t, "augment "+aug+" twice", first, res, 0)
			}
		})
	}
	o := smallOptions(t, model)
	o.Augment = "views:0"
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "views:K") {
		t.Fatalf("bad augment: error %v", err)
	}
}

func TestCacheBudget(t *testing.T) {
	if got := cacheBudget(64); got != 64<<20 {
		t.Errorf("cacheBudget(64) = %d", got)
	}
	avail := memlimit.AvailableMiB()
	if avail <= 0 {
		t.Skip("no /proc/meminfo MemAvailable on this system")
	}
	if got := cacheBudget(0); got != avail<<19 {
		t.Errorf("cacheBudget(0) = %d, want half of %d MiB", got, avail)
	}
}
