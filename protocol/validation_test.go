package protocol

import (
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/dataset"
)

// TestValidationSplit: protocol.validation holds out a seeded fraction of
// each client's training images (per class, from the training split, never a
// test image) as a "val" set over the client's training space; the rest of
// the task — test images and their indices, the other evaluation sets — is
// unchanged, and the draw is reproducible.
func TestValidationSplit(t *testing.T) {
	ds, err := dataset.Load("world", "", dataset.Options{Seed: 1, NumClasses: 12, TrainPerClass: 8, TestPerClass: 3, ImageSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{BaseToNovel, Dirichlet} {
		t.Run(name, func(t *testing.T) {
			o := Options{Name: name, Clients: 3, Beta: 0.5, MinSamples: -1, Seed: 2}
			plain, err := Build(ds, o)
			if err != nil {
				t.Fatal(err)
			}
			o.Validation = 0.25
			task, err := Build(ds, o)
			if err != nil {
				t.Fatal(err)
			}
			again, err := Build(ds, o)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(task.Metrics, ValidationMetric) || slices.Contains(plain.Metrics, ValidationMetric) {
				t.Fatalf("metrics %v (without validation %v): want %q only with validation", task.Metrics, plain.Metrics, ValidationMetric)
			}
			testKeys := map[string]bool{}
			for _, it := range ds.Test {
				testKeys[it.Key] = true
			}
			if len(task.Test) <= len(plain.Test) {
				t.Fatalf("%d evaluation images with validation, %d without", len(task.Test), len(plain.Test))
			}
			for i := range plain.Test {
				if task.Test[i].Key != plain.Test[i].Key {
					t.Fatalf("test image %d moved: %s, was %s", i, task.Test[i].Key, plain.Test[i].Key)
				}
			}
			for ci, c := range task.Clients {
				p := plain.Clients[ci]
				val := c.Evals[len(c.Evals)-1]
				if val.Name != ValidationMetric || val.Space != c.TrainSpace || len(c.Evals) != len(p.Evals)+1 {
					t.Fatalf("client %d: last evaluation set %q over space %d (train space %d), %d sets (was %d)", c.ID, val.Name, val.Space, c.TrainSpace, len(c.Evals), len(p.Evals))
				}
				for k := range p.Evals {
					if !slices.Equal(c.Evals[k].Images, p.Evals[k].Images) {
						t.Fatalf("client %d: evaluation set %s changed", c.ID, p.Evals[k].Name)
					}
				}
				// train ∪ val = the client's training images without validation, disjoint
				label := map[string]int{}
				for k, i := range p.Train {
					label[task.Train[i].Key] = p.Labels[k]
				}
				seen := map[string]bool{}
				for k, i := range c.Train {
					key := task.Train[i].Key
					if label[key] != c.Labels[k] {
						t.Fatalf("client %d: training image %s has label %d, want %d", c.ID, key, c.Labels[k], label[key])
					}
					seen[key] = true
				}
				for k, j := range val.Images {
					if j < len(plain.Test) {
						t.Fatalf("client %d: validation image %d is a test image", c.ID, j)
					}
					it := task.Test[j]
					if testKeys[it.Key] {
						t.Fatalf("client %d: validation image %s is in the test split", c.ID, it.Key)
					}
					l, ok := label[it.Key]
					if !ok || seen[it.Key] {
						t.Fatalf("client %d: validation image %s is not one of its held-out training images", c.ID, it.Key)
					}
					if val.Labels[k] != l {
						t.Fatalf("client %d: validation image %s has label %d, want %d", c.ID, it.Key, val.Labels[k], l)
					}
					seen[it.Key] = true
				}
				if len(seen) != len(p.Train) || len(c.Train)+len(val.Images) != len(p.Train) {
					t.Fatalf("client %d: %d training + %d validation images, want the %d training images split", c.ID, len(c.Train), len(val.Images), len(p.Train))
				}
				want := 0.25 * float64(len(p.Train))
				if n := float64(len(val.Images)); len(c.Train) == 0 || n < 1 || n < want-float64(len(label)) || n > want+float64(len(label)) {
					t.Fatalf("client %d: %d of %d training images held out, want about %.1f and ≥ 1 left", c.ID, len(val.Images), len(p.Train), want)
				}
				a := again.Clients[ci]
				if !slices.Equal(a.Train, c.Train) || !slices.Equal(a.Evals[len(a.Evals)-1].Images, val.Images) {
					t.Fatalf("client %d: the validation draw is not reproducible", c.ID)
				}
			}
			if slices.Equal(plain.UsedTrain(), task.UsedTrain()) {
				t.Fatal("held-out images are still trained on")
			}
		})
	}
}

// TestValidationRefused: a fraction that leaves a client no training image,
// or one outside [0, 1), is an error naming protocol.validation.
func TestValidationRefused(t *testing.T) {
	ds, err := dataset.Load("world", "", dataset.Options{Seed: 1, NumClasses: 4, TrainPerClass: 1, TestPerClass: 2, ImageSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []float64{0.6, 0.99, -0.1, 1} {
		_, err := Build(ds, Options{Name: BaseToNovel, Clients: 2, Shots: 1, Seed: 1, Validation: f})
		if err == nil || !strings.Contains(err.Error(), "protocol.validation") {
			t.Errorf("validation %v with one training image per client: error %v, want one naming protocol.validation", f, err)
		}
	}
	// two images of one class: 0.8 rounds to both
	if _, err := Build(ds, Options{Name: BaseToNovel, Clients: 2, Shots: 2, Seed: 1, Validation: 0.8}); err == nil || !strings.Contains(err.Error(), "protocol.validation") {
		t.Errorf("validation 0.8 of two images per client: error %v, want one naming protocol.validation", err)
	}
	if _, err := Build(ds, Options{Name: BaseToNovel, Clients: 2, Shots: 2, Seed: 1, Validation: 0.3}); err != nil {
		t.Errorf("validation 0.3 of two images per client (one held out): %v", err)
	}
}
