package experiment

import (
	"context"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/internal/testmodel"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/protocol"
)

// TestRunOnResNetCLIP runs zero-shot and a prompt method on a ResNet CLIP
// read by the ordinary loader, and refuses a ViT-only method clearly.
func TestRunOnResNetCLIP(t *testing.T) {
	dir := t.TempDir()
	if err := testmodel.WriteResNet(dir, 24, 5); err != nil {
		t.Fatal(err)
	}
	o := Options{
		ModelPath: dir, Dataset: "world",
		DatasetOptions: dataset.Options{NumClasses: 8, TrainPerClass: 4, TestPerClass: 4},
		Protocol:       protocol.Options{Name: protocol.BaseToNovel, Clients: 2},
		Methods:        []string{ZeroShot, "promptfl"},
		Sections:       promptSections(2),
		Train:          train.Options{Epochs: 1, Batch: 4, LR: 0.01, Momentum: 0.9},
		Rounds:         1, Fraction: 1, Seed: 3, OutDir: t.TempDir(),
	}
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.Summary.Get("promptfl"); !ok {
		t.Fatal("promptfl did not run on the ResNet")
	}
	o.Methods, o.Sections, o.OutDir = []string{PFedMMA}, mmaSections(2, 4, 0.1), t.TempDir()
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "ResNet") {
		t.Errorf("pFedMMA on a ResNet: %v", err)
	}
	// visual prompts (ADAPT), LoRA in the ViT blocks, patch-token OT: refused
	// before any work, naming the method and the backbone
	for _, m := range []string{"adapt", "clip_lora", "fedotp"} {
		e, err := config.Preset("world-compare")
		if err != nil {
			t.Fatal(err)
		}
		o.Methods, o.Sections, o.OutDir = []string{m}, e.Sections, t.TempDir()
		if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "ResNet") || !strings.Contains(err.Error(), m) {
			t.Errorf("%s on a ResNet: %v", m, err)
		}
	}
}
