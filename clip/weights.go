// Package clip is OpenAI's CLIP model — a ViT image encoder and a causal text
// transformer — with hand-written forward and backward passes.
package clip

import "github.com/pfedmma/pfedmma/clip/resnet"

// VisionConfig describes the ViT image encoder.
type VisionConfig struct {
	// ResNet marks CLIP's ResNet image encoder (RN50 family, package
	// clip/resnet): then only ImageSize applies and Weights.ResNet holds
	// the encoder; the ViT fields below are zero.
	ResNet    bool
	ImageSize int // input side in pixels (224 for ViT-B/16)
	PatchSize int // patch side (16 for ViT-B/16)
	Width     int // residual width d_v
	Layers    int // number of residual blocks
	Heads     int // attention heads (width/64 in OpenAI CLIP)
	MLPWidth  int // hidden width of the MLP (4·width)
}

// TextConfig describes the causal text transformer.
type TextConfig struct {
	ContextLength int // 77
	VocabSize     int // 49408
	Width         int // residual width d_t
	Layers        int
	Heads         int
	MLPWidth      int
}

// Config is the architecture of a CLIP model, inferred from tensor shapes.
type Config struct {
	EmbedDim int // joint embedding dimension
	Vision   VisionConfig
	Text     TextConfig
}

// Grid is the number of patches per image side.
func (c VisionConfig) Grid() int {
	if c.PatchSize <= 0 {
		return 0 // a ResNet tower has no patches
	}
	return c.ImageSize / c.PatchSize
}

// Tokens is the number of vision tokens (patches + class token).
func (c VisionConfig) Tokens() int { g := c.Grid(); return g*g + 1 }

// BlockWeights are the parameters of one pre-LN residual attention block, in
// PyTorch layout (a Linear weight is [out, in]).
type BlockWeights struct {
	Ln1W, Ln1B []float32 // [D]
	InProjW    []float32 // [3D, D]  q, k, v stacked
	InProjB    []float32 // [3D]
	OutProjW   []float32 // [D, D]
	OutProjB   []float32 // [D]
	Ln2W, Ln2B []float32 // [D]
	FcW        []float32 // [H, D]   c_fc, H = MLP width
	FcB        []float32 // [H]
	ProjW      []float32 // [D, H]   c_proj
	ProjB      []float32 // [D]
}

// VisionWeights are the image encoder's parameters.
type VisionWeights struct {
	Conv1W   []float32 // [D, 3, P, P] patchify convolution, no bias
	ClassEmb []float32 // [D]
	PosEmb   []float32 // [T, D], T = grid² + 1
	LnPreW   []float32 // [D]
	LnPreB   []float32 // [D]
	Blocks   []BlockWeights
	LnPostW  []float32 // [D]
	LnPostB  []float32 // [D]
	Proj     []float32 // [D, E] (x @ proj)
}

// TextWeights are the text encoder's parameters.
type TextWeights struct {
	TokenEmb []float32 // [V, D]
	PosEmb   []float32 // [Ctx, D]
	Blocks   []BlockWeights
	LnFinalW []float32 // [D]
	LnFinalB []float32 // [D]
	Proj     []float32 // [D, E] (x @ text_projection)
}

// Weights is a complete CLIP model.
type Weights struct {
	Config Config
	Vision VisionWeights
	// ResNet is the ResNet image encoder when Config.Vision.ResNet.
	ResNet     *resnet.Encoder
	Text       TextWeights
	LogitScale float32 // log of the logit multiplier (log 100 in released models)
}
