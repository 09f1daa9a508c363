package fedpha

import (
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/methodtest"
)

// BenchmarkFedPHAStep is one training step (text forward and backward,
// loss, SGD) at ViT-B/16 text shapes, as BenchmarkPromptFLStep: width 512,
// 12 blocks, 8 heads, n_ctx 16, 24 classes with 1–4-token names, batch 32
// of cached image features; FedPHA's three prompt batches (local, global, projected local; each with a shared prefix) and the SVD projection.
// It reports images/s.
func BenchmarkFedPHAStep(b *testing.B) {
	methodtest.BenchPromptStep(b, func(m *clip.Model, tokens []int, nCtx int) (methodtest.PromptLearner, error) {
		l, err := New(m, tokens, Config{NCtx: nCtx, Ratio: 0.8, Alpha: 1, LambdaPull: 1, LambdaPush: 1, InitStd: 0.02, Seed: 1})
		return l, err
	})
}
