package pretrain

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pfedmma/pfedmma/internal/memlimit"
	"github.com/pfedmma/pfedmma/tokenizer"
)

// Upper bounds of the pretraining flags: far above any model this command
// is for (the shipped one is width 128, 4 layers), low enough that a typo
// is refused before anything is allocated.
const (
	maxWidth        = 8192
	maxLayers       = 256
	maxBatch        = 1 << 16
	maxSteps        = 1 << 30
	maxMerges       = 1 << 20
	maxVocabCapts   = 1 << 24
	maxEvalPerClass = 1 << 14
	maxWorkers      = 1024
)

// checkBounds refuses sizes beyond the bounds above, naming the flag.
func (o Options) checkBounds() error {
	for _, b := range []struct {
		flag   string
		v, max int
	}{
		{"--vision-width", o.VisionWidth, maxWidth}, {"--text-width", o.TextWidth, maxWidth},
		{"--embed-dim", o.EmbedDim, maxWidth},
		{"--vision-layers", o.VisionLayers, maxLayers}, {"--text-layers", o.TextLayers, maxLayers},
		{"--vision-heads", o.VisionHeads, max(o.VisionWidth, 1)}, {"--text-heads", o.TextHeads, max(o.TextWidth, 1)},
		{"--context", o.ContextLength, tokenizer.MaxContextLength},
		{"--batch", o.Batch, maxBatch}, {"--steps", o.Steps, maxSteps},
		{"--merges", o.Merges, maxMerges}, {"--vocab-captions", o.VocabCaptions, maxVocabCapts},
		{"--eval-per-class", o.EvalPerClass, maxEvalPerClass}, {"--workers", o.Workers, maxWorkers},
	} {
		if b.v > b.max {
			return fmt.Errorf("pretrain: %s %d is above %d (the largest accepted): %w", b.flag, b.v, b.max, ErrOptions)
		}
	}
	return nil
}

// EstimateBytes is the peak memory pretraining with o needs, roughly: the
// parameters with their gradients and AdamW's two moments, and one batch's
// activations of both encoders (a conservative figure per token, block and
// width unit, and the attention matrices).
func (o Options) EstimateBytes() int64 {
	const f32, perActivation = 4, 20
	m, a := memlimit.Mul, memlimit.Add
	vocab := int64(256 + 2 + o.Merges)
	grid := int64(o.ImageSize / max(o.PatchSize, 1))
	tokens := grid*grid + 1
	vw, tw, E := int64(o.VisionWidth), int64(o.TextWidth), int64(o.EmbedDim)
	vParams := a(m(12, vw, vw, int64(o.VisionLayers)), m(3, int64(o.PatchSize), int64(o.PatchSize), vw), m(tokens+2, vw), m(vw, E))
	tParams := a(m(12, tw, tw, int64(o.TextLayers)), m(vocab, tw), m(int64(o.ContextLength)+2, tw), m(tw, E))
	B := int64(o.Batch)
	ctx := int64(o.ContextLength)
	act := a(m(B, tokens, vw, int64(o.VisionLayers), perActivation, f32),
		m(B, int64(o.VisionHeads), tokens, tokens, int64(o.VisionLayers), 2*f32),
		m(B, ctx, tw, int64(o.TextLayers), perActivation, f32),
		m(B, int64(o.TextHeads), ctx, ctx, int64(o.TextLayers), 2*f32),
		m(B, 3, int64(o.ImageSize), int64(o.ImageSize), f32))
	return a(m(a(vParams, tParams), 4*f32), act)
}

// checkMemory refuses options whose estimate does not fit in the memory
// available (availMiB ≤ 0: unknown).
func (o Options) checkMemory(availMiB int64) error {
	if err := memlimit.Check("pretraining", o.EstimateBytes(), availMiB,
		"lower --batch, --vision-width/--text-width, --vision-layers/--text-layers, --image-size or --context"); err != nil {
		return fmt.Errorf("pretrain: %w: %w", err, ErrOptions)
	}
	return nil
}

// MarkerFile marks a folder pretrain writes into: a fresh pretraining
// overwrites its own earlier outputs there, never files of the same names
// that it did not write.
const MarkerFile = ".pfedmma-pretrain"

// checkOutDir refuses a run into a folder that holds files of the names
// pretrain writes but no MarkerFile (files pretrain did not write, which it
// would overwrite) unless it resumes the state there, then marks the
// folder.
func (o Options) checkOutDir() error {
	_, markErr := os.Stat(filepath.Join(o.OutDir, MarkerFile))
	resuming := o.Resume && fileExists(filepath.Join(o.OutDir, StateFile))
	if markErr != nil && !resuming {
		var clash []string
		for _, n := range []string{ModelFile, ReportFile, StateFile, tokenizer.SimpleVocabGz, tokenizer.HFVocab, tokenizer.HFMerges} {
			if _, err := os.Lstat(filepath.Join(o.OutDir, n)); err == nil {
				clash = append(clash, n)
			}
		}
		if len(clash) > 0 {
			return fmt.Errorf("pretrain: --out %s holds %s, which pretrain did not write (no %s marker) and would overwrite: choose another --out",
				o.OutDir, strings.Join(clash, ", "), MarkerFile)
		}
	}
	return os.WriteFile(filepath.Join(o.OutDir, MarkerFile), []byte("pfedmma pretrain\n"), 0o644)
}
