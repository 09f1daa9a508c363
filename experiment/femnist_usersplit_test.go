package experiment

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/report"
)

// writeLEAFSplit writes FEMNIST digits 0–3 in LEAF's layout with the given
// writers in train/a.json and test/a.json (n images each).
func writeLEAFSplit(t *testing.T, trainUsers, testUsers []string, n int) string {
	t.Helper()
	root := t.TempDir()
	r := rand.New(rand.NewPCG(5, 6))
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
	file := func(users []string) []byte {
		data := map[string]any{}
		ns := []int{}
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
	for rel, users := range map[string][]string{"train/a.json": trainUsers, "test/a.json": testUsers} {
		p := filepath.Join(root, "femnist", "data", rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, file(users), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestFEMNISTUserSplit: FEMNIST in LEAF's user split runs (before: refused,
// "domain … has 12 training images but no test images"). A writer with
// training data only is a client that trains and has no local score;
// writers with test data only score the global model as "unseen".
func TestFEMNISTUserSplit(t *testing.T) {
	model := smallModel(t)
	cases := []struct {
		name             string
		trainW, testW    []string
		clients, unseen  int
		scored           []int // clients with a local score
		wantAcc, wantUns bool
	}{
		// LEAF's user split: no writer in both
		{"user split", []string{"w0", "w1", "w2"}, []string{"u3", "u4"}, 3, 2, nil, false, true},
		// mixed: w0 trains only, w1 and w2 also test, u3 tests only
		{"mixed", []string{"w0", "w1", "w2"}, []string{"w1", "w2", "u3"}, 3, 1, []int{1, 2}, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := Options{
				ModelPath: model, Dataset: "femnist_digits", Root: writeLEAFSplit(t, c.trainW, c.testW, 8),
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
			if len(res.Task.Clients) != c.clients || len(res.Task.GlobalEvals) != c.unseen {
				t.Fatalf("%d clients, %d unseen sets; want %d, %d", len(res.Task.Clients), len(res.Task.GlobalEvals), c.clients, c.unseen)
			}
			for _, m := range []string{ZeroShot, "promptfl"} {
				got, ok := res.Summary.Get(m)
				if !ok {
					t.Fatalf("no %s row", m)
				}
				if v, ok := got["acc"]; ok != c.wantAcc || ok && (v < 0 || v > 100) {
					t.Errorf("%s acc = %v (present %v, want present %v)", m, v, ok, c.wantAcc)
				}
				if v, ok := got[protocol.UnseenMetric]; !ok || v < 0 || v > 100 {
					t.Errorf("%s unseen = %v (present %v)", m, v, ok)
				}
			}
			// the last round's record: only clients with test images are scored
			recs, err := report.ReadMetricsJSONL(filepath.Join(o.OutDir, report.MetricsJSONL))
			if err != nil {
				t.Fatal(err)
			}
			var last *report.RoundRecord
			for i := range recs {
				if recs[i].Method == "promptfl" {
					last = &recs[i]
				}
			}
			if last == nil {
				t.Fatal("no promptfl record")
			}
			var scored []int
			for _, cm := range last.Clients {
				if _, ok := cm.Metrics["acc"]; ok {
					scored = append(scored, cm.ID)
				}
			}
			if !slices.Equal(scored, c.scored) {
				t.Errorf("clients with a local score: %v, want %v", scored, c.scored)
			}
		})
	}
}
