// Package testmodel writes small random CLIP models for tests: a model folder
// with model.safetensors (OpenAI names) and a BPE vocabulary learned from the
// generated world's class prompts, loadable by the ordinary loaders.
package testmodel

import (
	"path/filepath"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/tokenizer"
	"github.com/pfedmma/pfedmma/world"
)

// Write creates the model folder dir: a 3-block, width-64 CLIP at 32 px with
// the given text context, random weights from seed.
func Write(dir string, context int, seed uint64) error {
	w, err := world.New(world.DefaultConfig())
	if err != nil {
		return err
	}
	var corpus []string
	for _, c := range w.Classes() {
		corpus = append(corpus, "a photo of a "+c.Name()+".")
	}
	tok := tokenizer.FromMerges(tokenizer.Learn(corpus, 80))
	if err := tok.WriteBPEGz(filepath.Join(dir, "bpe_simple_vocab_16e6.txt.gz")); err != nil {
		return err
	}
	cfg := clip.Config{EmbedDim: 32,
		Vision: clip.VisionConfig{ImageSize: 32, PatchSize: 8, Width: 64, Layers: 3, Heads: 1, MLPWidth: 256},
		Text:   clip.TextConfig{ContextLength: context, VocabSize: tok.VocabSize(), Width: 64, Layers: 3, Heads: 1, MLPWidth: 256}}
	return checkpoint.Save(filepath.Join(dir, "model.safetensors"), clip.Random(cfg, seed), checkpoint.OpenAI)
}
