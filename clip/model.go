package clip

import (
	"math"
	"math/rand/v2"

	"github.com/pfedmma/pfedmma/clip/resnet"
)

// Model is a CLIP model ready to run: weights plus the two encoders with
// their buffers. A Model is not safe for concurrent use; its GEMMs use every
// configured thread.
type Model struct {
	W      *Weights
	Vision *Vision
	Text   *Text
	// ResNet is the image encoder of a ResNet CLIP (Vision then has no
	// blocks; the ViT-specific hooks — prefixes, adapters, tokens — do not
	// apply).
	ResNet *resnet.Encoder
}

// New wraps weights into a runnable model. The weights are shared, not copied.
func New(w *Weights) *Model {
	c := w.Config
	m := &Model{
		W:      w,
		Vision: &Vision{Cfg: c.Vision, W: &w.Vision},
		Text:   &Text{Cfg: c.Text, W: &w.Text},
		ResNet: w.ResNet,
	}
	for i := range w.Vision.Blocks {
		m.Vision.Stack.Blocks = append(m.Vision.Stack.Blocks, &Block{
			W: &w.Vision.Blocks[i], D: c.Vision.Width, H: c.Vision.Heads, MLP: c.Vision.MLPWidth,
		})
	}
	for i := range w.Text.Blocks {
		m.Text.Stack.Blocks = append(m.Text.Stack.Blocks, &Block{
			W: &w.Text.Blocks[i], D: c.Text.Width, H: c.Text.Heads, MLP: c.Text.MLPWidth, Causal: true,
		})
	}
	return m
}

// EnableGrads allocates gradient buffers for every weight (full training,
// such as pretraining a small CLIP) and returns them; the encoders and
// blocks accumulate into them from then on.
func (m *Model) EnableGrads() *Weights {
	g := ZeroLike(m.W)
	m.Vision.G, m.Text.G = &g.Vision, &g.Text
	for i, b := range m.Vision.Stack.Blocks {
		b.G = &g.Vision.Blocks[i]
	}
	for i, b := range m.Text.Stack.Blocks {
		b.G = &g.Text.Blocks[i]
	}
	return g
}

// EncodeImage returns image features [B, E] for normalised pixels [B, 3, S, S].
func (m *Model) EncodeImage(pixels []float32, B int) []float32 {
	feat := make([]float32, B*m.W.Config.EmbedDim)
	if m.ResNet != nil {
		m.ResNet.Encode(feat, pixels, B)
		return feat
	}
	m.Vision.Encode(feat, pixels, B)
	return feat
}

// EncodeText returns text features [B, E] for tokens [B, Ctx].
func (m *Model) EncodeText(tokens []int, B int) ([]float32, error) {
	feat := make([]float32, B*m.W.Config.EmbedDim)
	return feat, m.Text.Encode(feat, tokens, B)
}

// Normalize scales each of the n rows of x [n, d] to unit L2 norm in place
// and returns the norms it divided by.
func Normalize(x []float32, n, d int) []float32 { return NormalizeRows(nil, x, n, d) }

// Logits returns exp(logitScale) · cos(image_i, text_j) as [nI, nT] for raw
// (unnormalised) features img [nI, E] and txt [nT, E].
func Logits(img, txt []float32, nI, nT, E int, logitScale float32) []float32 {
	var c CosineLogits
	return c.Forward(img, txt, nI, nT, E, logitScale)
}

// ViTB16 is the configuration of OpenAI's ViT-B/16 CLIP.
func ViTB16() Config {
	return Config{
		EmbedDim: 512,
		Vision:   VisionConfig{ImageSize: 224, PatchSize: 16, Width: 768, Layers: 12, Heads: 12, MLPWidth: 3072},
		Text:     TextConfig{ContextLength: 77, VocabSize: 49408, Width: 512, Layers: 12, Heads: 8, MLPWidth: 2048},
	}
}

// ZeroLike returns weights of the same configuration as w, all zero.
func ZeroLike(w *Weights) *Weights {
	return Zero(w.Config)
}

// Zero returns all-zero weights of configuration c.
func Zero(c Config) *Weights {
	z := func(n int) []float32 { return make([]float32, n) }
	block := func(D, H int) BlockWeights {
		return BlockWeights{
			Ln1W: z(D), Ln1B: z(D), InProjW: z(3 * D * D), InProjB: z(3 * D),
			OutProjW: z(D * D), OutProjB: z(D), Ln2W: z(D), Ln2B: z(D),
			FcW: z(H * D), FcB: z(H), ProjW: z(D * H), ProjB: z(D),
		}
	}
	v, t, E := c.Vision, c.Text, c.EmbedDim
	w := &Weights{Config: c}
	w.Vision = VisionWeights{
		Conv1W: z(v.Width * 3 * v.PatchSize * v.PatchSize), ClassEmb: z(v.Width),
		PosEmb: z(v.Tokens() * v.Width), LnPreW: z(v.Width), LnPreB: z(v.Width),
		LnPostW: z(v.Width), LnPostB: z(v.Width), Proj: z(v.Width * E),
	}
	for i := 0; i < v.Layers; i++ {
		w.Vision.Blocks = append(w.Vision.Blocks, block(v.Width, v.MLPWidth))
	}
	w.Text = TextWeights{
		TokenEmb: z(t.VocabSize * t.Width), PosEmb: z(t.ContextLength * t.Width),
		LnFinalW: z(t.Width), LnFinalB: z(t.Width), Proj: z(t.Width * E),
	}
	for i := 0; i < t.Layers; i++ {
		w.Text.Blocks = append(w.Text.Blocks, block(t.Width, t.MLPWidth))
	}
	return w
}

// Random returns weights of configuration c initialised like CLIP's
// training code (normal with std width^-0.5 scaled per layer, LayerNorm
// weight 1 and bias 0, logit scale log(1/0.07)); used for benchmarks, tests
// and as the start of pretraining.
func Random(c Config, seed uint64) *Weights {
	w := Zero(c)
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	normal := func(x []float32, std float64) {
		for i := range x {
			x[i] = float32(rng.NormFloat64() * std)
		}
	}
	ones := func(x []float32) {
		for i := range x {
			x[i] = 1
		}
	}
	initBlocks := func(bs []BlockWeights, D, L int) {
		projStd := math.Pow(float64(D), -0.5) * math.Pow(float64(2*L), -0.5)
		attnStd := math.Pow(float64(D), -0.5)
		fcStd := math.Pow(float64(2*D), -0.5)
		for i := range bs {
			b := &bs[i]
			ones(b.Ln1W)
			ones(b.Ln2W)
			normal(b.InProjW, attnStd)
			normal(b.OutProjW, projStd)
			normal(b.FcW, fcStd)
			normal(b.ProjW, projStd)
		}
	}
	v, t := c.Vision, c.Text
	scale := math.Pow(float64(v.Width), -0.5)
	normal(w.Vision.Conv1W, math.Pow(float64(3*v.PatchSize*v.PatchSize), -0.5))
	normal(w.Vision.ClassEmb, scale)
	normal(w.Vision.PosEmb, scale)
	ones(w.Vision.LnPreW)
	ones(w.Vision.LnPostW)
	normal(w.Vision.Proj, scale)
	initBlocks(w.Vision.Blocks, v.Width, v.Layers)
	normal(w.Text.TokenEmb, 0.02)
	normal(w.Text.PosEmb, 0.01)
	ones(w.Text.LnFinalW)
	normal(w.Text.Proj, math.Pow(float64(t.Width), -0.5))
	initBlocks(w.Text.Blocks, t.Width, t.Layers)
	w.LogitScale = float32(math.Log(1 / 0.07))
	return w
}
