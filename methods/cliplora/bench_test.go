package cliplora

import (
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/gemm"
)

// benchBlock times one ViT-B/16 image block with LoRA (r 2, dropout 0.25)
// on a batch of 8 images: forward in train mode and backward to the block
// input and the factors, the block's share of a CLIP-LoRA training step.
func benchBlock(b *testing.B, p gemm.Precision) {
	c := clip.ViTB16()
	c.Vision.Layers, c.Text.Layers = 1, 1
	m := clip.New(clip.Random(c, 1))
	if err := m.SetPrecision(p); err != nil {
		b.Fatal(err)
	}
	s := &Settings{Rank: 2, Alpha: 1, Dropout: 0.25, Scale: "sqrt"}
	rng := rand.New(rand.NewPCG(1, 1))
	l := New(m, s, rng)
	l.Attach(m, rng)
	blk := m.Vision.Stack.Blocks[0]
	B, T, D := 8, 197, 768
	x, out, dx, dout := make([]float32, B*T*D), make([]float32, B*T*D), make([]float32, B*T*D), make([]float32, B*T*D)
	for i := range x {
		x[i], dout[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	var sc clip.BlockScratch
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		blk.Forward(out, x, B, T, nil, true, &sc)
		blk.Backward(dx, dout, &sc)
	}
	b.ReportMetric(float64(B*b.N)/b.Elapsed().Seconds(), "images/s")
}

// BenchmarkLoRABlock times a LoRA block's forward and backward pass in
// float32 and with the frozen products in bfloat16.
func BenchmarkLoRABlock(b *testing.B) {
	b.Run("fp32", func(b *testing.B) { benchBlock(b, gemm.FP32) })
	b.Run("bf16", func(b *testing.B) { benchBlock(b, gemm.BF16) })
}
