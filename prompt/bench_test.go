package prompt

import (
	"math/rand/v2"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/gradcheck"
)

// BenchmarkEncoder is one forward and backward pass of 24 class prompts
// with a shared 16-token context at ViT-B/16 text shapes (width 512, 12
// blocks, 8 heads), with and without the shared-prefix path.
func BenchmarkEncoder(b *testing.B) {
	cfg := clip.ViTB16()
	cfg.Vision.Layers = 0 // only the text tower runs
	m := clip.New(clip.Random(cfg, 1))
	const C, nCtx = 24, 16
	L := cfg.Text.ContextLength
	tokens := make([]int, C*L)
	for c := 0; c < C; c++ {
		row := tokens[c*L:]
		row[0] = 49406
		p := 1
		for ; p <= nCtx; p++ {
			row[p] = 343
		}
		for k := 0; k <= c%4; k++ {
			row[p] = 1000 + 37*c + k
			p++
		}
		row[p], row[p+1] = 269, 49407
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for _, bc := range []struct {
		name    string
		noShare bool
	}{{"shared", false}, {"plain", true}} {
		b.Run(bc.name, func(b *testing.B) {
			enc, err := NewEncoder(m, tokens, nCtx)
			if err != nil {
				b.Fatal(err)
			}
			enc.noShare = bc.noShare
			ctx := gradcheck.Rand(rng, nCtx*enc.D, 0.02)
			dfeat := gradcheck.Rand(rng, C*enc.E, 1)
			for i := 0; i < b.N; i++ {
				if _, err := enc.Forward(ctx, 1, true); err != nil {
					b.Fatal(err)
				}
				enc.Backward(dfeat)
			}
		})
	}
}
