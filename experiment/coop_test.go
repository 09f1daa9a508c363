package experiment

import (
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/protocol"

	"github.com/pfedmma/pfedmma/world"
)

// writeCoOpDTD writes a small dataset in CoOp's DTD layout (images/<class>/…
// plus split_zhou_DescribableTextures.json) with world renderings as images.
func writeCoOpDTD(t *testing.T, classes, perSplit int) string {
	t.Helper()
	w, err := world.New(world.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	comps, err := w.ChooseClasses(classes, 5)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	split := map[string][][3]any{"train": {}, "val": {}, "test": {}}
	for label, c := range comps {
		folder := filepath.Join(root, "dtd", "images", c.Name())
		if err := os.MkdirAll(folder, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, s := range []struct {
			name string
			sp   world.Split
		}{{"train", world.TrainSplit}, {"test", world.TestSplit}} {
			for i := 0; i < perSplit; i++ {
				img, err := w.Render(world.Spec{Split: s.sp, Class: c, Domain: world.Clipart, Index: i}, 48)
				if err != nil {
					t.Fatal(err)
				}
				rel := fmt.Sprintf("%s/%s_%d.png", c.Name(), s.name, i)
				f, err := os.Create(filepath.Join(root, "dtd", "images", rel))
				if err != nil {
					t.Fatal(err)
				}
				if err := png.Encode(f, img); err != nil {
					t.Fatal(err)
				}
				f.Close()
				split[s.name] = append(split[s.name], [3]any{rel, label, c.Name()})
			}
		}
	}
	data, _ := json.Marshal(split)
	if err := os.WriteFile(filepath.Join(root, "dtd", "split_zhou_DescribableTextures.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestRunOnCoOpLayout runs the base-to-novel protocol on images read from
// disk in CoOp's layout (split file, JPEG/PNG decoding, preprocessing) with
// the embedded model: zero-shot works on the files and pFedMMA trains.
func TestRunOnCoOpLayout(t *testing.T) {
	root := writeCoOpDTD(t, 8, 6)
	model, err := assets.DefaultModelDir()
	if err != nil {
		t.Fatal(err)
	}
	o := Options{
		ModelPath: model, Dataset: "dtd", Root: root, DatasetOptions: dataset.Options{NoWriteSplit: true},
		Protocol: protocol.Options{Name: protocol.BaseToNovel, Clients: 2, Shots: 4},
		Methods:  []string{ZeroShot, PFedMMA},
		Sections: mmaSections(4, 8, 0.05),
		Train:    train.Options{Epochs: 2, Batch: 8, LR: 0.05, Momentum: 0.9, WD: 5e-4},
		Rounds:   2, Fraction: 1, Seed: 1, OutDir: t.TempDir(),
	}
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	zs, _ := res.Summary.Get(ZeroShot)
	pf, _ := res.Summary.Get(PFedMMA)
	t.Logf("zero-shot %v\npFedMMA %v", zs, pf)
	if zs["novel"] < 40 { // 4 novel classes: chance 25%
		t.Errorf("zero-shot novel accuracy %.1f%% on files read from disk", zs["novel"])
	}
	if pf["local"] < zs["local"] {
		t.Errorf("pFedMMA local %.1f%% below zero-shot %.1f%%", pf["local"], zs["local"])
	}

	// a damaged split file is reported with its name
	bad := writeCoOpDTD(t, 2, 1)
	os.WriteFile(filepath.Join(bad, "dtd", "split_zhou_DescribableTextures.json"), []byte(`{"train": [[1]]}`), 0o644)
	o.Root, o.OutDir = bad, t.TempDir()
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "split_zhou_DescribableTextures.json") {
		t.Fatalf("damaged split file: error %v", err)
	}
}
