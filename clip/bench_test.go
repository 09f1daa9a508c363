package clip

import (
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/internal/gradcheck"
)

func benchBlock(b *testing.B, backward bool) {
	c := ViTB16()
	c.Vision.Layers, c.Text.Layers = 1, 1
	w := Random(c, 1)
	m := New(w)
	blk := m.Vision.Stack.Blocks[0]
	B, T, D := 32, 197, 768
	rng := rand.New(rand.NewPCG(1, 1))
	x, out, dx, dout := gradcheck.Rand(rng, B*T*D, 1), make([]float32, B*T*D), make([]float32, B*T*D), gradcheck.Rand(rng, B*T*D, 1)
	var sc BlockScratch
	blk.Forward(out, x, B, T, nil, true, &sc)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if backward {
			blk.Backward(dx, dout, &sc)
		} else {
			blk.Forward(out, x, B, T, nil, true, &sc)
		}
	}
}

// BenchmarkBlockForward is one ViT-B/16 block at batch 32.
func BenchmarkBlockForward(b *testing.B) { benchBlock(b, false) }

// BenchmarkBlockBackward is its input-gradient backward pass.
func BenchmarkBlockBackward(b *testing.B) { benchBlock(b, true) }
