package world

import (
	"errors"
	"image"
	"slices"
	"testing"

	"github.com/pfedmma/pfedmma/dataset"
)

func TestChooseClasses(t *testing.T) {
	w := newWorld(t, nil)
	for _, k := range []int{1, 2, 10, 20, 21, 128, NumCompositions} {
		cls, err := w.ChooseClasses(k, 3)
		if err != nil {
			t.Fatalf("k=%d: %v", k, err)
		}
		if len(cls) != k {
			t.Fatalf("k=%d: got %d classes", k, len(cls))
		}
		seen := map[Composition]bool{}
		for _, c := range cls {
			if seen[c] {
				t.Fatalf("k=%d: class %s repeated", k, c)
			}
			seen[c] = true
		}
		base, novel := cls[:k/2], cls[k/2:]
		nHeld := len(w.HeldOut())
		for i, c := range novel {
			// held-out classes fill the novel half as far as they go.
			if want := i < nHeld; w.IsHeldOut(c) != want {
				t.Errorf("k=%d: novel[%d] %s held out = %v, want %v", k, i, c, !want, want)
			}
		}
		for _, c := range base {
			if w.IsHeldOut(c) {
				t.Errorf("k=%d: base class %s is held out", k, c)
			}
		}
		// with enough base classes, every novel attribute value is in base.
		if k >= 20 {
			have := map[string]bool{}
			for _, c := range base {
				have[c.Colour.String()], have[c.Pattern.String()], have[c.Shape.String()] = true, true, true
			}
			for _, c := range novel {
				for _, a := range []string{c.Colour.String(), c.Pattern.String(), c.Shape.String()} {
					if !have[a] {
						t.Errorf("k=%d: novel %s uses %q, absent from base classes", k, c, a)
					}
				}
			}
		}
	}
	a, _ := w.ChooseClasses(20, 1)
	b, _ := w.ChooseClasses(20, 1)
	c, _ := w.ChooseClasses(20, 2)
	if !slices.Equal(a, b) || slices.Equal(a, c) {
		t.Errorf("ChooseClasses not a function of the seed: %v / %v / %v", a, b, c)
	}
	for _, k := range []int{0, -1, NumCompositions + 1} {
		if _, err := w.ChooseClasses(k, 0); !errors.Is(err, ErrConfig) {
			t.Errorf("ChooseClasses(%d) error %v", k, err)
		}
	}
}

func TestDataset(t *testing.T) {
	w := newWorld(t, nil)
	opts := DatasetOptions{NumClasses: 6, TrainPerClass: 3, ValPerClass: 1, TestPerClass: 2, Domains: []Domain{Sketch, Photo}, Size: 32, Seed: 5}
	ds, err := w.Dataset(opts)
	if err != nil {
		t.Fatal(err)
	}
	if ds.Name != "world" || len(ds.Classes) != 6 || !slices.Equal(ds.Domains, []string{"sketch", "photo"}) {
		t.Fatalf("dataset %s classes %v domains %v", ds.Name, ds.Classes, ds.Domains)
	}
	want, _ := w.ChooseClasses(6, 5)
	for i, c := range want {
		if ds.Classes[i] != c.Name() {
			t.Errorf("class %d = %q, want %q", i, ds.Classes[i], c.Name())
		}
	}
	for _, sp := range []struct {
		name  string
		items []dataset.Item
		per   int
		split Split
	}{{"train", ds.Train, 3, TrainSplit}, {"val", ds.Val, 1, TrainSplit}, {"test", ds.Test, 2, TestSplit}} {
		if len(sp.items) != 6*2*sp.per {
			t.Errorf("%s: %d items, want %d", sp.name, len(sp.items), 6*2*sp.per)
		}
		count := map[[2]int]int{}
		for _, it := range sp.items {
			src, ok := it.Source.(Source)
			if !ok {
				t.Fatalf("%s %s: source %T", sp.name, it.Key, it.Source)
			}
			s := src.Spec
			if s.Class.Name() != ds.Classes[it.Label] || s.Domain.String() != ds.Domains[it.Domain] || s.Split != sp.split || s.Stream != 5 || it.Key != s.Key() {
				t.Errorf("%s %s: label %d domain %d spec %+v", sp.name, it.Key, it.Label, it.Domain, s)
			}
			count[[2]int{it.Label, it.Domain}]++
		}
		for k, n := range count {
			if n != sp.per {
				t.Errorf("%s: label %d domain %d has %d items, want %d", sp.name, k[0], k[1], n, sp.per)
			}
		}
	}
	img, err := ds.Test[0].Source.Load()
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds() != image.Rect(0, 0, 32, 32) {
		t.Errorf("loaded image bounds %v", img.Bounds())
	}
	// explicit classes keep their order.
	fixed := []Composition{{Colour: 1, Pattern: 2, Shape: 3}, {Colour: 0, Pattern: 0, Shape: 0}}
	ds2, err := w.Dataset(DatasetOptions{Classes: fixed})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ds2.Classes, []string{fixed[0].Name(), fixed[1].Name()}) || len(ds2.Domains) != NumDomains || len(ds2.Train) != 2*NumDomains*16 {
		t.Errorf("explicit classes: %v, %d domains, %d train", ds2.Classes, len(ds2.Domains), len(ds2.Train))
	}
}

func TestDatasetErrors(t *testing.T) {
	w := newWorld(t, nil)
	tests := []struct {
		name string
		opts DatasetOptions
	}{
		{"negative count", DatasetOptions{TrainPerClass: -1}},
		{"bad size", DatasetOptions{Size: 3}},
		{"too many classes", DatasetOptions{NumClasses: NumCompositions + 1}},
		{"empty classes", DatasetOptions{Classes: []Composition{}}},
		{"bad class", DatasetOptions{Classes: []Composition{{Colour: 50}}}},
		{"repeated class", DatasetOptions{Classes: []Composition{{}, {}}}},
		{"empty domains", DatasetOptions{Domains: []Domain{}}},
		{"bad domain", DatasetOptions{Domains: []Domain{7}}},
		{"repeated domain", DatasetOptions{Domains: []Domain{Photo, Photo}}},
	}
	for _, tt := range tests {
		if _, err := w.Dataset(tt.opts); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: error %v, want ErrConfig", tt.name, err)
		}
	}
}

func TestRegisteredLoader(t *testing.T) {
	if !slices.Contains(dataset.Names(), "world") {
		t.Fatalf("dataset names %v lack \"world\"", dataset.Names())
	}
	ds, err := dataset.Load("world", "", dataset.Options{Seed: 4, Domains: []string{"painting", "clipart"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ds.Domains, []string{"painting", "clipart"}) || len(ds.Classes) != 20 || len(ds.Test) != 20*2*16 {
		t.Errorf("loaded %d classes, domains %v, %d test items", len(ds.Classes), ds.Domains, len(ds.Test))
	}
	if _, err := dataset.Load("world", "", dataset.Options{Domains: []string{"real"}}); !errors.Is(err, ErrConfig) {
		t.Errorf("unknown domain: error %v, want ErrConfig", err)
	}
}
