// Package pretrain trains a small CLIP from scratch on the captioned images
// of the generated world (and, when installed, Fashion-MNIST): a byte-level
// BPE vocabulary learned from the captions, both encoders initialised at
// random, CLIP's symmetric InfoNCE loss with a learned temperature, AdamW
// with a cosine schedule, resumable checkpoints, and a zero-shot evaluation
// on seen and held-out compositions. The result is written in the formats of
// released CLIP models, so the ordinary loaders read it.
package pretrain

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/world"
)

// Options configures a pretraining run. Start from DefaultOptions.
type Options struct {
	// WorldSeed and HoldoutFraction configure the generated world (the
	// other world settings are world.DefaultConfig's, with Size =
	// ImageSize).
	WorldSeed       uint64  `json:"world_seed"`
	HoldoutFraction float64 `json:"holdout_fraction"`

	// Architecture.
	ImageSize     int `json:"image_size"`
	PatchSize     int `json:"patch_size"`
	VisionWidth   int `json:"vision_width"`
	VisionLayers  int `json:"vision_layers"`
	VisionHeads   int `json:"vision_heads"`
	TextWidth     int `json:"text_width"`
	TextLayers    int `json:"text_layers"`
	TextHeads     int `json:"text_heads"`
	ContextLength int `json:"context_length"`
	EmbedDim      int `json:"embed_dim"`

	// Merges is the most BPE merges learned (fewer when the captions run
	// out of pairs); VocabCaptions is how many pretraining captions the
	// vocabulary is learned from.
	Merges        int `json:"merges"`
	VocabCaptions int `json:"vocab_captions"`

	// Optimisation: Steps batches of Batch pairs, AdamW (β2 0.98, eps 1e-6
	// as CLIP) with peak learning rate LR after Warmup linear steps, cosine
	// decay to MinLR, decoupled weight decay WeightDecay on matrices, and
	// global gradient-norm clipping at ClipNorm (0: off).
	Steps       int     `json:"steps"`
	Batch       int     `json:"batch"`
	LR          float64 `json:"lr"`
	MinLR       float64 `json:"min_lr"`
	WeightDecay float64 `json:"weight_decay"`
	Warmup      int     `json:"warmup"`
	ClipNorm    float64 `json:"clip_norm"`
	// Seed initialises the model and selects the Fashion-MNIST samples.
	Seed uint64 `json:"seed"`
	// DenseWeight, when positive, adds the patch-token term (DenseLoss:
	// the mean of each image's unit ln_post→proj patch features contrasted
	// with the captions) with this weight beside the class-token InfoNCE,
	// so that patch tokens align with text. 0 (the shipped model's
	// setting) trains the class token only.
	DenseWeight float64 `json:"dense_weight,omitempty"`

	// FashionDir holds Fashion-MNIST's IDX files; when they are present a
	// FashionFraction of each batch is Fashion-MNIST training images with
	// templated captions. Empty: dataset.FashionMNISTDir.
	FashionDir      string  `json:"fashion_dir"`
	FashionFraction float64 `json:"fashion_fraction"`

	// EvalPerClass is the number of test images per composition in the
	// final zero-shot evaluation.
	EvalPerClass int `json:"eval_per_class"`
	// DType is the storage type of model.safetensors: "f32" or "bf16".
	DType string `json:"dtype"`

	// Run-time settings; they do not change the result.
	OutDir          string `json:"-"`
	CheckpointEvery int    `json:"-"`
	Resume          bool   `json:"-"`
	// Workers is the number of rendering goroutines (0: 2).
	Workers int `json:"-"`
}

// DefaultOptions returns the settings of the shipped model.
func DefaultOptions() Options {
	return Options{
		WorldSeed: 1, HoldoutFraction: 0.25,
		ImageSize: 32, PatchSize: 8,
		VisionWidth: 128, VisionLayers: 4, VisionHeads: 2,
		TextWidth: 128, TextLayers: 4, TextHeads: 2,
		ContextLength: 24, EmbedDim: 128,
		Merges: 1000, VocabCaptions: 20000,
		Steps: 2000, Batch: 128, LR: 1e-3, MinLR: 1e-5, WeightDecay: 0.1, Warmup: 100, ClipNorm: 1,
		Seed: 1, FashionFraction: 0.1, EvalPerClass: 8, DType: "f32",
		OutDir: "pretrained", CheckpointEvery: 200,
	}
}

// ErrOptions is wrapped by every error Validate returns.
var ErrOptions = errors.New("invalid pretraining options")

// Validate reports options that cannot describe a run.
func (o Options) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("pretrain: "+format+": %w", append(a, ErrOptions)...)
	}
	switch {
	case !(o.HoldoutFraction >= 0 && o.HoldoutFraction <= 0.5):
		return bad("holdout fraction %g not in [0, 0.5]", o.HoldoutFraction)
	case o.ImageSize < 8 || o.ImageSize > 1024:
		return bad("image size %d not in [8, 1024]", o.ImageSize)
	case o.PatchSize < 1 || o.ImageSize%o.PatchSize != 0:
		return bad("patch size %d does not divide image size %d", o.PatchSize, o.ImageSize)
	case o.VisionLayers < 1 || o.TextLayers < 1:
		return bad("layers %d/%d, want at least 1", o.VisionLayers, o.TextLayers)
	case o.VisionHeads < 1 || o.VisionWidth%o.VisionHeads != 0:
		return bad("vision width %d not divisible by %d heads", o.VisionWidth, o.VisionHeads)
	case o.TextHeads < 1 || o.TextWidth%o.TextHeads != 0:
		return bad("text width %d not divisible by %d heads", o.TextWidth, o.TextHeads)
	case o.ContextLength < 4:
		return bad("context length %d, want at least 4", o.ContextLength)
	case o.EmbedDim < 1:
		return bad("embed dim %d, want at least 1", o.EmbedDim)
	case o.Merges < 0 || o.VocabCaptions < 1:
		return bad("merges %d, vocab captions %d", o.Merges, o.VocabCaptions)
	case o.Steps < 1 || o.Batch < 2:
		return bad("steps %d, batch %d: want ≥1 steps of ≥2 pairs", o.Steps, o.Batch)
	case !(o.LR > 0) || math.IsInf(o.LR, 0) || !(o.MinLR >= 0) || o.MinLR > o.LR:
		return bad("learning rates %g → %g", o.LR, o.MinLR)
	case !(o.WeightDecay >= 0) || !(o.ClipNorm >= 0) || math.IsInf(o.WeightDecay, 0):
		return bad("weight decay %g, clip norm %g", o.WeightDecay, o.ClipNorm)
	case o.Warmup < 0 || o.Warmup > o.Steps:
		return bad("warmup %d not in [0, steps %d]", o.Warmup, o.Steps)
	case !(o.DenseWeight >= 0) || math.IsInf(o.DenseWeight, 1):
		return bad("dense weight %g, want a finite value ≥ 0", o.DenseWeight)
	case !(o.FashionFraction >= 0 && o.FashionFraction <= 1):
		return bad("fashion fraction %g not in [0, 1]", o.FashionFraction)
	case o.EvalPerClass < 0:
		return bad("eval per class %d", o.EvalPerClass)
	case o.DType != "f32" && o.DType != "bf16":
		return bad("dtype %q, want f32 or bf16", o.DType)
	case o.OutDir == "":
		return bad("no output folder")
	case o.CheckpointEvery < 0 || o.Workers < 0:
		return bad("checkpoint every %d, workers %d", o.CheckpointEvery, o.Workers)
	}
	return o.checkBounds()
}

// WorldConfig returns the configuration of the generated world.
func (o Options) WorldConfig() world.Config {
	c := world.DefaultConfig()
	c.Seed, c.HoldoutFraction, c.Size = o.WorldSeed, o.HoldoutFraction, o.ImageSize
	return c
}

// ModelConfig returns the CLIP architecture for a vocabulary of vocabSize
// ids (MLP width 4× the residual width, as CLIP).
func (o Options) ModelConfig(vocabSize int) clip.Config {
	return clip.Config{
		EmbedDim: o.EmbedDim,
		Vision: clip.VisionConfig{ImageSize: o.ImageSize, PatchSize: o.PatchSize, Width: o.VisionWidth,
			Layers: o.VisionLayers, Heads: o.VisionHeads, MLPWidth: 4 * o.VisionWidth},
		Text: clip.TextConfig{ContextLength: o.ContextLength, VocabSize: vocabSize, Width: o.TextWidth,
			Layers: o.TextLayers, Heads: o.TextHeads, MLPWidth: 4 * o.TextWidth},
	}
}

// Flag is one command-line flag of `pfedmma pretrain` that sets a field of
// Options.
type Flag struct {
	Name  string
	Usage string
	// Ptr points into the Options the flag set was built for: *int,
	// *uint64, *float64, *string or *bool.
	Ptr any
}

// Flags lists the flags that set o's fields, in a stable order; the CLI
// defines exactly these, and Command prints them.
func (o *Options) Flags() []Flag {
	return []Flag{
		{"out", "output folder", &o.OutDir},
		{"world-seed", "seed of the generated world (held-out compositions, images)", &o.WorldSeed},
		{"holdout", "fraction of compositions never shown in pretraining", &o.HoldoutFraction},
		{"image-size", "input side in pixels", &o.ImageSize},
		{"patch-size", "ViT patch side", &o.PatchSize},
		{"vision-width", "image encoder width", &o.VisionWidth},
		{"vision-layers", "image encoder blocks", &o.VisionLayers},
		{"vision-heads", "image encoder attention heads", &o.VisionHeads},
		{"text-width", "text encoder width", &o.TextWidth},
		{"text-layers", "text encoder blocks", &o.TextLayers},
		{"text-heads", "text encoder attention heads", &o.TextHeads},
		{"context", "text context length (tokens)", &o.ContextLength},
		{"embed-dim", "joint embedding dimension", &o.EmbedDim},
		{"merges", "most BPE merges to learn", &o.Merges},
		{"vocab-captions", "captions the vocabulary is learned from", &o.VocabCaptions},
		{"steps", "optimisation steps", &o.Steps},
		{"batch", "pairs per step", &o.Batch},
		{"lr", "peak learning rate", &o.LR},
		{"min-lr", "final learning rate of the cosine schedule", &o.MinLR},
		{"wd", "AdamW weight decay (matrices only)", &o.WeightDecay},
		{"warmup", "linear warmup steps", &o.Warmup},
		{"clip-norm", "global gradient-norm clip (0: off)", &o.ClipNorm},
		{"seed", "model initialisation seed", &o.Seed},
		{"dense-weight", "weight of the patch-token contrastive term (0: class token only)", &o.DenseWeight},
		{"fashion-dir", "Fashion-MNIST IDX folder (default: Debian's, mixed in when present)", &o.FashionDir},
		{"fashion-fraction", "fraction of each batch from Fashion-MNIST when present", &o.FashionFraction},
		{"eval-per-class", "test images per composition in the final evaluation", &o.EvalPerClass},
		{"dtype", "storage type of model.safetensors: f32 or bf16", &o.DType},
		{"checkpoint-every", "steps between resumable checkpoints (0: only at the end)", &o.CheckpointEvery},
		{"workers", "rendering goroutines (0: 2)", &o.Workers},
	}
}

// Command returns the `pfedmma pretrain` command line that reproduces o,
// with every result-relevant flag spelled out (values quoted for a POSIX
// shell where needed).
func (o Options) Command() string {
	parts := []string{"pfedmma", "pretrain"}
	for _, f := range o.Flags() {
		switch f.Name {
		case "checkpoint-every", "workers":
			continue
		case "dense-weight":
			if o.DenseWeight == 0 {
				continue // commands of models trained without it stay as they were
			}
		}
		var v string
		switch p := f.Ptr.(type) {
		case *int:
			v = strconv.Itoa(*p)
		case *uint64:
			v = strconv.FormatUint(*p, 10)
		case *float64:
			v = strconv.FormatFloat(*p, 'g', -1, 64)
		case *string:
			v = *p
			if v == "" {
				continue
			}
			if strings.ContainsAny(v, " \t'\"\\$`*?;&|<>()") {
				v = "'" + strings.ReplaceAll(v, "'", `'\''`) + "'" // POSIX shell quoting
			}
		}
		parts = append(parts, "--"+f.Name+"="+v)
	}
	return strings.Join(parts, " ")
}

// maxLogitScale is CLIP's clamp of the learned temperature, log 100.
var maxLogitScale = float32(math.Log(100))
