package paritytest

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

// The methods without reference fixtures (the authors' code is not public
// or not runnable) write fixtures in the reference layout from a tiny
// random CLIP; these are the pieces they share.

// TinyCtx is the text context of TinyWeights.
const TinyCtx = 12

// TinyWeights are a random one-block CLIP (seed 11): 8-d features, 8 px
// images, TinyCtx-token prompts.
func TinyWeights() *clip.Weights {
	cfg := clip.Config{EmbedDim: 8,
		Vision: clip.VisionConfig{ImageSize: 8, PatchSize: 4, Width: 8, Layers: 1, Heads: 2, MLPWidth: 16},
		Text:   clip.TextConfig{ContextLength: TinyCtx, VocabSize: 20, Width: 8, Layers: 1, Heads: 2, MLPWidth: 16}}
	return clip.Random(cfg, 11)
}

// TinyTokens is C class prompts "SOT class . EOT" [C, TinyCtx].
func TinyTokens(C int) []int64 {
	tok := make([]int64, C*TinyCtx)
	for c := 0; c < C; c++ {
		row := tok[c*TinyCtx:]
		row[0], row[1], row[2], row[3] = 18, int64(4+c), 3, 19
	}
	return tok
}

// RandTensor is a tensor of the shape with normal entries of the scale.
func RandTensor(rng *rand.Rand, scale float64, shape ...int) *tensor.Tensor {
	t := tensor.New(shape...)
	for i := range t.Data {
		t.Data[i] = float32(rng.NormFloat64() * scale)
	}
	return t
}

// Labels are n random labels below K.
func Labels(rng *rand.Rand, n, K int) safetensors.Int64Tensor {
	l := safetensors.Int64Tensor{Shape: []int{n}, Data: make([]int64, n)}
	for i := range l.Data {
		l.Data[i] = int64(rng.IntN(K))
	}
	return l
}

// Write writes a fixture of method under t.TempDir(): params, and batch
// with the integer tensors ints and meta in the batch file; it loads them
// as `pfedmma step` does.
func Write(t *testing.T, m *clip.Model, method string, params, batch tensor.Named, ints map[string]safetensors.Int64Tensor, meta map[string]string, sets ...string) *parity.Fixture {
	t.Helper()
	dir := t.TempDir()
	pp, bp := filepath.Join(dir, "init.safetensors"), filepath.Join(dir, "batch.safetensors")
	if err := safetensors.Write(pp, params, nil, map[string]string{"method": method}); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.Write(bp, batch, ints, meta); err != nil {
		t.Fatal(err)
	}
	f, err := parity.Load(m, pp, []string{bp}, sets)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
