package promptfolio

import (
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/methodtest"
)

// BenchmarkPromptFolioStep is one training step (text forward and backward,
// loss, SGD) at ViT-B/16 text shapes, as BenchmarkPromptFLStep: width 512,
// 12 blocks, 8 heads, n_ctx 16, 24 classes with 1–4-token names, batch 32
// of cached image features; PromptFolio's two prompts (the text rows run twice: prompt 0 and prompt 1, each with a shared prefix).
// It reports images/s.
func BenchmarkPromptFolioStep(b *testing.B) {
	methodtest.BenchPromptStep(b, func(m *clip.Model, tokens []int, nCtx int) (methodtest.PromptLearner, error) {
		l, err := New(m, tokens, Config{NCtx: nCtx, Theta: 0.4, InitStd: 0.02, Seed: 1})
		return l, err
	})
}
