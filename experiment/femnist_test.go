package experiment

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/protocol"
)

// writeLEAF writes a small FEMNIST in LEAF's JSON layout: writers w0..w3
// with training and test images of the digits 0–3 (blobs at a digit-
// dependent place), and writer u4 with test images only (an unseen
// writer).
func writeLEAF(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	r := rand.New(rand.NewPCG(1, 2))
	img := func(label int) []float64 {
		x := make([]float64, 28*28)
		cx, cy := 6+label*5, 8+label*3
		for y := range 28 {
			for xx := range 28 {
				v := 0.05 * r.Float64()
				if (xx-cx)*(xx-cx)+(y-cy)*(y-cy) < 16 {
					v = 0.9
				}
				x[y*28+xx] = v
			}
		}
		return x
	}
	file := func(users []string, n int) []byte {
		data := map[string]any{}
		var ns []int
		for _, u := range users {
			var xs [][]float64
			var ys []int
			for k := range n {
				xs, ys = append(xs, img(k%4)), append(ys, k%4)
			}
			data[u] = map[string]any{"x": xs, "y": ys}
			ns = append(ns, n)
		}
		b, err := json.Marshal(map[string]any{"users": users, "num_samples": ns, "user_data": data})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for rel, b := range map[string][]byte{
		"train/a.json": file([]string{"w0", "w1", "w2", "w3"}, 12),
		"test/a.json":  file([]string{"w0", "w1", "w2", "w3", "u4"}, 8),
	} {
		p := filepath.Join(root, "femnist", "data", rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestFEMNISTNatural runs the natural protocol end to end on LEAF files:
// every writer with training images is a client scored on its own test
// images, the writer with test images only scores the global model
// ("unseen"), for frozen CLIP and for PromptFL.
func TestFEMNISTNatural(t *testing.T) {
	o := Options{
		ModelPath: smallModel(t), Dataset: "femnist_digits", Root: writeLEAF(t),
		DatasetOptions: dataset.Options{ImageSize: 32},
		Protocol:       protocol.Options{Name: protocol.Natural},
		Methods:        []string{ZeroShot, "promptfl"},
		Sections:       promptSections(4),
		Train:          train.Options{Epochs: 1, Batch: 8, LR: 0.05, Momentum: 0.9},
		Rounds:         2, Fraction: 1, Seed: 3, OutDir: t.TempDir(),
	}
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Task == nil || len(res.Task.Clients) != 4 || len(res.Task.GlobalEvals) != 1 {
		t.Fatalf("task: %+v", res.Task)
	}
	for _, m := range []string{ZeroShot, "promptfl"} {
		got, ok := res.Summary.Get(m)
		if !ok {
			t.Fatalf("no %s row", m)
		}
		for _, k := range []string{"acc", protocol.UnseenMetric} {
			if v, ok := got[k]; !ok || v < 0 || v > 100 {
				t.Errorf("%s %s = %v (present %v)", m, k, v, ok)
			}
		}
		t.Logf("%s %v", m, got)
	}
}
