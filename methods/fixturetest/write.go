package fixturetest

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/methods/fixture"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

// Write writes a fixture in the reference layout under t.TempDir() — params
// (the parameters file, its metadata naming method) and batch with the
// integer tensors ints and meta (the batch file) — and loads it as
// `pfedmma step` does, with the overrides sets.
func Write(t *testing.T, m *clip.Model, method string, params, batch tensor.Named, ints map[string]safetensors.Int64Tensor, meta map[string]string, sets ...string) *fixture.Fixture {
	t.Helper()
	dir := t.TempDir()
	pp, bp := filepath.Join(dir, "init.safetensors"), filepath.Join(dir, "batch.safetensors")
	if err := safetensors.Write(pp, params, nil, map[string]string{"method": method}); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.Write(bp, batch, ints, meta); err != nil {
		t.Fatal(err)
	}
	f, err := fixture.Load(m, pp, []string{bp}, sets)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// RandTensor draws a tensor of shape with N(0, scale²) entries from rng.
func RandTensor(rng *rand.Rand, scale float64, shape ...int) *tensor.Tensor {
	t := tensor.New(shape...)
	for i := range t.Data {
		t.Data[i] = float32(rng.NormFloat64() * scale)
	}
	return t
}

// Labels draws n labels in 0..K−1 from rng.
func Labels(rng *rand.Rand, n, K int) safetensors.Int64Tensor {
	l := safetensors.Int64Tensor{Shape: []int{n}, Data: make([]int64, n)}
	for i := range l.Data {
		l.Data[i] = int64(rng.IntN(K))
	}
	return l
}
