package protocol

import (
	"testing"

	_ "github.com/pfedmma/pfedmma/world" // registers the world dataset

	"github.com/pfedmma/pfedmma/dataset"
)

// TestBaseSetReadings: with OthersBase each client's Base set is the full
// base set minus its own classes' images; by default it is the full set.
func TestBaseSetReadings(t *testing.T) {
	ds, err := dataset.Load("world", "", dataset.Options{Seed: 1, NumClasses: 12, TrainPerClass: 4, TestPerClass: 3, ImageSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	all, err := Build(ds, Options{Name: BaseToNovel, Clients: 3, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	others, err := Build(ds, Options{Name: BaseToNovel, Clients: 3, Seed: 2, OthersBase: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range others.Clients {
		local, base := c.Evals[0], c.Evals[1]
		full := all.Clients[i].Evals[1]
		nBase := 0
		for _, it := range ds.Test {
			if it.Label < 6 { // 12 classes: labels 0..5 are base
				nBase++
			}
		}
		if len(full.Images) != nBase {
			t.Fatalf("full base set has %d images, want %d", len(full.Images), nBase)
		}
		if len(base.Images) != len(full.Images)-len(local.Images) {
			t.Fatalf("client %d: others-base %d images, full %d, local %d", c.ID, len(base.Images), len(full.Images), len(local.Images))
		}
		own := map[int]bool{}
		for _, j := range local.Images {
			own[j] = true
		}
		for _, j := range base.Images {
			if own[j] {
				t.Fatalf("client %d: its own test image %d is in its others-base set", c.ID, j)
			}
		}
	}
}
