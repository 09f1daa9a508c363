package bench

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
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
	if r.TrainImagesPerS != 1.5 || r.EvalImagesPerS != 2.5 || r.PeakRSSMiB != 100 {
		t.Errorf("LoadReference = %+v", r)
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
