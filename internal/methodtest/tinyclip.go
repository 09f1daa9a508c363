package methodtest

import "github.com/pfedmma/pfedmma/clip"

// TinyCLIP describes a random CLIP for gradient checks: 8×8 images, width
// 8, text context 12, random weights of seed 3, the text embeddings scaled
// by EmbScale so that the blocks work away from their linear regime.
type TinyCLIP struct {
	EmbedDim, VisionLayers, TextLayers int
	EmbScale                           float32
}

// Prompts returns the model and C class prompts [C, 12] "SOT X×nCtx c… .
// EOT", class c with c%3+1 class tokens.
func (c TinyCLIP) Prompts(C, nCtx int) (*clip.Model, []int) {
	cfg := clip.Config{EmbedDim: c.EmbedDim,
		Vision: clip.VisionConfig{ImageSize: 8, PatchSize: 4, Width: 8, Layers: c.VisionLayers, Heads: 2, MLPWidth: 16},
		Text:   clip.TextConfig{ContextLength: 12, VocabSize: 20, Width: 8, Layers: c.TextLayers, Heads: 2, MLPWidth: 16}}
	w := clip.Random(cfg, 3)
	for _, x := range [][]float32{w.Text.TokenEmb, w.Text.PosEmb} {
		for j := range x {
			x[j] *= c.EmbScale
		}
	}
	tok := make([]int, C*12)
	for k := 0; k < C; k++ {
		row := tok[k*12:]
		row[0] = 18
		p := 1
		for ; p <= nCtx; p++ {
			row[p] = 5
		}
		for j := 0; j <= k%3; j++ {
			row[p] = 6 + k + j
			p++
		}
		row[p], row[p+1] = 3, 19
	}
	return clip.New(w), tok
}
