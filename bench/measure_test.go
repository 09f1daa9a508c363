package bench

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSummarise: the median lies between the extremes and is the middle
// order statistic; the spread of identical times is 0 and grows with noise.
func TestSummarise(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	times := make([]float64, 11)
	for i := range times {
		times[i] = 1 + rng.Float64()
	}
	s := summarise(times)
	sorted := slices.Sorted(slices.Values(times))
	if s.Steps != 11 || s.Median != sorted[5] || s.Min != sorted[0] || s.Max != sorted[10] {
		t.Errorf("summarise = %+v, sorted times %v", s, sorted)
	}
	if !(s.Spread > 0) {
		t.Errorf("spread of noisy times = %v, want > 0", s.Spread)
	}
	if c := summarise([]float64{2, 2, 2, 2}); c.Spread != 0 || c.Median != 2 {
		t.Errorf("constant times: %+v", c)
	}
	if r := s.PerS(32); r != 32/s.Median {
		t.Errorf("PerS(32) = %v", r)
	}
}

func TestMeasureWarmupAndCancel(t *testing.T) {
	var calls []int
	tm, err := Measure(context.Background(), 2, 10, func(i int) error { calls = append(calls, i); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 12 || calls[0] >= 0 || calls[1] >= 0 || calls[2] != 0 || tm.Steps != 10 {
		t.Errorf("calls %v, steps %d: want 2 warm-up calls (negative index) then 0..9", calls, tm.Steps)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Measure(ctx, 1, 10, func(int) error { return nil }); err == nil {
		t.Error("cancelled Measure returned no error")
	}
}

func TestLoadReference(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	r, err := LoadReference(write("ok.json", `{"train_images_per_s": 1.5, "eval_images_per_s": 2.5, "peak_rss_mib": 100, "extra": "ignored"}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.TrainImagesPerS != 1.5 || r.EvalImagesPerS != 2.5 || r.PeakRSSMiB != 100 || r.Config != "" {
		t.Errorf("LoadReference = %+v", r)
	}
	if got := r.Label(1.5); got != "ref 1.50" {
		t.Errorf("Label without a configuration = %q", got)
	}
	r, err = LoadReference(write("config.json", `{"train_images_per_s": 2.81, "eval_images_per_s": 4.16, "config": "torch 1.13.1, OpenBLAS Cooperlake, 2 threads"}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.Config != "torch 1.13.1, OpenBLAS Cooperlake, 2 threads" {
		t.Errorf("config = %q", r.Config)
	}
	if got, want := r.Label(4.16), "ref 4.16; torch 1.13.1, OpenBLAS Cooperlake, 2 threads"; got != want {
		t.Errorf("Label = %q, want %q", got, want)
	}
	for name, body := range map[string]string{
		"missing.json":  `{"train_images_per_s": 1.5}`,
		"negative.json": `{"train_images_per_s": -1, "eval_images_per_s": 2}`,
		"broken.json":   `{"train_images_per_s": `,
	} {
		if _, err := LoadReference(write(name, body)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := LoadReference(filepath.Join(dir, "absent.json")); err == nil {
		t.Error("absent file: no error")
	}
}

// TestTrainRows: the like-for-like (online) rows come first, then the
// cached ones; each row carries its own rate, spread, ratio and the
// reference rate of its kind (training or evaluation).
func TestTrainRows(t *testing.T) {
	r := &TrainResult{
		TrainCachedPerS: 1, EvalCachedPerS: 2, TrainOnlinePerS: 3, EvalOnlinePerS: 4,
		TrainCachedSpread: 0.1, EvalCachedSpread: 0.2, TrainOnlineSpread: 0.3, EvalOnlineSpread: 0.4,
		SpeedupTrainCached: 10, SpeedupEvalCached: 20, SpeedupTrainOnline: 30, SpeedupEvalOnline: 40,
		ReferenceTrainPerS: 0.5, ReferenceEvalPerS: 0.7,
	}
	rows := r.Rows()
	want := []struct {
		rate, spread, speedup, ref float64
		like                       bool
	}{{3, 0.3, 30, 0.5, true}, {4, 0.4, 40, 0.7, true}, {1, 0.1, 10, 0.5, false}, {2, 0.2, 20, 0.7, false}}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i, w := range want {
		g := rows[i]
		if g.Rate != w.rate || g.Spread != w.spread || g.Speedup != w.speedup || g.Reference != w.ref || g.LikeForLike != w.like {
			t.Errorf("row %d (%s) = %+v, want %+v", i, g.Name, g, w)
		}
		if train := g.Reference == 0.5; train != (g.Name[:5] == "train") {
			t.Errorf("row %d %q divides by the reference rate %v", i, g.Name, g.Reference)
		}
	}
}

func TestReferenceCheck(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ref.json")
	body := `{"train_images_per_s": 1, "eval_images_per_s": 2, "method": "promptfl", "batch": 32, "classes": 24, "image": 224}`
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := LoadReference(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Check("promptfl", 32, 24, 224); err != nil {
		t.Errorf("same setting: %v", err)
	}
	for _, c := range []struct {
		method                string
		batch, classes, image int
		key                   string
	}{
		{"fedpgp", 32, 24, 224, "method"},
		{"promptfl", 2, 24, 224, "batch"},
		{"promptfl", 32, 10, 224, "classes"},
		{"promptfl", 32, 24, 32, "image"},
	} {
		err := r.Check(c.method, c.batch, c.classes, c.image)
		if err == nil || !strings.Contains(err.Error(), c.key+" is") || !strings.Contains(err.Error(), p) {
			t.Errorf("Check(%s, %d, %d, %d) = %v, want an error naming %s and the file", c.method, c.batch, c.classes, c.image, err, c.key)
		}
	}
	// a reference that records no setting (pfedmma_ref.py's) is not checked
	bare := &Reference{TrainImagesPerS: 1, EvalImagesPerS: 1}
	if err := bare.Check("fedpgp", 4, 3, 64); err != nil {
		t.Errorf("bare reference: %v", err)
	}
}
