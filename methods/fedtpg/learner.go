package fedtpg

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// Config holds FedTPG's settings (the generator's shapes come from the
// model: E = the text width, D = the embedding dim).
type Config struct {
	NCtx       int     // n_ctx: prompt vectors (4)
	DCtx       int     // d_ctx: prompt depth; only 1 (see the package doc)
	Depth      int     // self-attention layers after the cross-attention (0)
	CrossHeads int     // cross-attention heads (4)
	SelfHeads  int     // self-attention heads (4)
	FFMult     int     // feed-forward width multiplier (4)
	InitStd    float64 // soft_prompt ~ N(0, InitStd²) (0.02)
	Seed       uint64  // seed of the initial draw
}

// DefaultConfig returns the authors' defaults (Launch_FL.py,
// config/defaults.py, the released cross-class run).
func DefaultConfig() Config {
	return Config{NCtx: 4, DCtx: 1, Depth: 0, CrossHeads: 4, SelfHeads: 4, FFMult: 4, InitStd: 0.02}
}

// Gen returns the generator's shapes on a model of text width E and
// embedding dim D.
func (c Config) Gen(E, D int) GenConfig {
	return GenConfig{NCtx: c.NCtx, DCtx: c.DCtx, Depth: c.Depth, CrossHeads: c.CrossHeads, SelfHeads: c.SelfHeads,
		FFMult: c.FFMult, E: E, D: D}
}

// Validate names the first bad setting that does not depend on the model.
func (c Config) Validate() error {
	if c.InitStd < 0 {
		return fmt.Errorf("fedtpg: init_std %g: must not be negative", c.InitStd)
	}
	// a width every head count divides: only the model-independent checks bite
	return c.Gen(max(c.CrossHeads, 1)*max(c.SelfHeads, 1), 1).Validate()
}

// Learner trains the generator of one label space: the K classes' prompts
// "X … X {name}." (the n_ctx "X" replaced by the generated vectors, the same
// for every class) and their bare names, whose frozen CLIP text features
// condition the generator. Per step, for image features I [B, Emb]:
//
//	T      = normalize(CLIP text features of the bare names)   [K, Emb] (no gradient)
//	ctx    = Generator(T)                                        [n_ctx, W]
//	txt    = text encoder with ctx at positions 1..n_ctx         [K, Emb]
//	logits = exp(logit_scale) · cos(I, txt)                      [B, K]
//	loss   = CE(logits, y)
//
// (W the text width, Emb the embedding dim). Several clients may share a
// Learner when they train one at a time: load a client's generator into
// Params() before its steps. Not safe for concurrent use.
type Learner struct {
	Cfg        Config
	LogitScale float32 // log of the logit multiplier (the model's by default)

	enc    *prompt.Encoder
	gen    *Generator
	p, g   tensor.Named
	K, Emb int
	raw    []float32 // [K, Emb] the names' text features before normalisation
	names  []float32 // [K, Emb] normalised: the generator's input
	ce     prompt.CosineCE
	txt    []float32 // [K, Emb] text features of the last Step
}

// New builds the learner of K classes from their prompt rows tokens [K, Ctx]
// ("X X … X {name}." with cfg.NCtx "X"s after the SOT) and their bare-name
// rows names [K, Ctx] ("{name}"). The generator is drawn from cfg.Seed.
func New(m *clip.Model, tokens, names []int, cfg Config) (*Learner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	gc := cfg.Gen(m.Text.Cfg.Width, m.W.Config.EmbedDim)
	if err := gc.Validate(); err != nil {
		return nil, err
	}
	enc, err := prompt.NewEncoder(m, tokens, cfg.NCtx)
	if err != nil {
		return nil, fmt.Errorf("fedtpg: %w", err)
	}
	K, Emb := enc.R, enc.E
	if len(names) != len(tokens) {
		return nil, fmt.Errorf("fedtpg: %d class-name token ids for %d prompt rows of %d", len(names), K, m.Text.Cfg.ContextLength)
	}
	l := &Learner{Cfg: cfg, LogitScale: m.W.LogitScale, enc: enc, K: K, Emb: Emb}
	if l.raw, err = NameFeatures(m, names, K); err != nil {
		return nil, err
	}
	l.names = append([]float32(nil), l.raw...)
	clip.Normalize(l.names, K, Emb)
	l.p = gc.InitParams(cfg.InitStd, rand.New(rand.NewPCG(cfg.Seed, 0x7e9)))
	l.g = tensor.Named{}
	for name, t := range l.p {
		l.g[name] = tensor.New(t.Shape...)
	}
	if l.gen, err = NewGenerator(gc, l.p, l.g); err != nil {
		return nil, err
	}
	return l, nil
}

// NameFeatures encodes the bare class-name rows names [K, Ctx] with the
// frozen text encoder of m (a private copy of its blocks, so adapters other
// methods attach to the shared model never apply): [K, Emb], raw.
func NameFeatures(m *clip.Model, names []int, K int) ([]float32, error) {
	text := clip.Text{Cfg: m.Text.Cfg, W: m.Text.W}
	for _, b := range m.Text.Stack.Blocks {
		text.Stack.Blocks = append(text.Stack.Blocks, &clip.Block{W: b.W, D: b.D, H: b.H, MLP: b.MLP, Causal: b.Causal})
	}
	feat := make([]float32, K*m.W.Config.EmbedDim)
	if err := text.Encode(feat, names, K); err != nil {
		return nil, fmt.Errorf("fedtpg: class names: %w", err)
	}
	return feat, nil
}

// Params returns the live generator tensors (reference names).
func (l *Learner) Params() tensor.Named { return l.p }

// Grads returns the gradients of the last Step.
func (l *Learner) Grads() tensor.Named { return l.g }

// Generator returns the learner's generator (its activations are those of
// the last Step or TextFeatures).
func (l *Learner) Generator() *Generator { return l.gen }

// NameInputs returns the class-name features [K, Emb] before and after
// normalisation (owned by the learner).
func (l *Learner) NameInputs() (raw, normalized []float32) { return l.raw, l.names }

// Step computes the loss of image features img [B, Emb] (B = len(labels),
// labels in 0..K−1) and overwrites Grads(). It returns the loss, its terms
// ("loss_ce") and the logits [B, K] (owned by the learner).
func (l *Learner) Step(img []float32, labels []int) (float64, map[string]float64, []float32, error) {
	B := len(labels)
	if B == 0 {
		return 0, nil, nil, errors.New("fedtpg: empty batch")
	}
	ctx := l.gen.Forward(l.names, l.K) // [n_ctx, W]
	txt, err := l.enc.Forward(ctx, 1, true)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("fedtpg: %w", err)
	}
	l.txt = txt
	loss, logits, dTxt, err := l.ce.Loss(img, txt, B, l.K, l.Emb, l.LogitScale, labels)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("fedtpg: %w", err)
	}
	l.gen.Backward(l.enc.Backward(dTxt))
	return loss, map[string]float64{"loss_ce": loss}, logits, nil
}

// TextFeatures generates the prompt from the class names and returns the
// raw class text features [K, Emb] (inference; owned by the learner, valid
// until the next call).
func (l *Learner) TextFeatures() ([]float32, error) {
	ctx := l.gen.Forward(l.names, l.K)
	return l.enc.Forward(ctx, 1, false)
}

// Prepare computes the class text features for scoring (client.Learner).
func (l *Learner) Prepare() error {
	f, err := l.TextFeatures()
	l.txt = append(l.txt[:0:0], f...)
	return err
}

// Logits scores image features img [B, Emb] against the prepared classes:
// [B, K].
func (l *Learner) Logits(img []float32, B int) ([]float32, error) {
	if len(l.txt) != l.K*l.Emb {
		return nil, errors.New("fedtpg: Logits before Prepare")
	}
	return clip.Logits(img, l.txt, B, l.K, l.Emb, l.LogitScale), nil
}

// NameRows derives the bare-name rows [K, Ctx] from CoOp prompt rows
// tokens [K, Ctx] ("SOT X…X {name} . EOT"): the rows without the n_ctx
// placeholder positions and the token just before the EOT. It is what
// tokenising the names gives whenever the name's last word and the period
// are separate tokens (every fixture and benchmark row); runs with a
// tokenizer tokenise the names themselves.
func NameRows(tokens []int, ctxLen, nCtx int) ([]int, error) {
	if ctxLen < 1 || len(tokens)%ctxLen != 0 {
		return nil, fmt.Errorf("fedtpg: %d token ids is not a whole number of %d-long rows", len(tokens), ctxLen)
	}
	K := len(tokens) / ctxLen
	eot := clip.EOTPositions(tokens, K, ctxLen)
	out := make([]int, len(tokens))
	for k, e := range eot {
		if e < nCtx+3 {
			return nil, fmt.Errorf("fedtpg: prompt row %d: EOT at %d leaves no class name after %d placeholders and before the final token", k, e, nCtx)
		}
		row, dst := tokens[k*ctxLen:(k+1)*ctxLen], out[k*ctxLen:(k+1)*ctxLen]
		dst[0] = row[0]
		n := copy(dst[1:], row[1+nCtx:e-1])
		dst[1+n] = row[e]
	}
	return out, nil
}
