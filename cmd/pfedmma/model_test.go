package main

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/experiment"
)

// TestLoadModelRefusesNaN: the commands' model loader (embed, zeroshot, …:
// experiment.LoadModel)
// refuses NaN weights naming the tensor.
func TestLoadModelRefusesNaN(t *testing.T) {
	dir := tinyWorldModel(t)
	file := filepath.Join(dir, "model.safetensors")
	w, _, err := checkpoint.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	w.Text.Proj[5] = float32(math.NaN())
	if err := checkpoint.Save(file, w, checkpoint.OpenAI); err != nil {
		t.Fatal(err)
	}
	if _, _, err := experiment.LoadModel(dir, ""); err == nil || !strings.Contains(err.Error(), "text_projection") {
		t.Fatalf("NaN model: error %v, want one naming text_projection", err)
	}
}
