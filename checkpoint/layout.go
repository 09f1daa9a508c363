package checkpoint

import (
	"fmt"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/tensor"
)

// Scheme is a tensor naming convention for CLIP checkpoints.
type Scheme string

// The supported naming schemes.
const (
	// OpenAI is the naming of OpenAI's CLIP and of open_clip
	// ("visual.conv1.weight", "transformer.resblocks.0.attn.in_proj_weight",
	// "text_projection", …), with fused q/k/v projections.
	OpenAI Scheme = "openai"
	// HF is the naming of Hugging Face transformers' CLIPModel
	// ("vision_model.encoder.layers.0.self_attn.q_proj.weight", …), with
	// separate q/k/v projections and transposed output projections.
	HF Scheme = "hf"
)

// param is one stored tensor and where its values live in clip.Weights.
type param struct {
	name      string
	shape     []int     // shape as stored in the checkpoint
	dst       []float32 // destination in clip.Weights (nil when only shapes are wanted)
	transpose bool      // stored as the [cols, rows] transpose of dst's 2-D layout
}

// layout lists every tensor of a CLIP model with config cfg in scheme s.
// With w nil the destinations are nil and only names and shapes are valid;
// otherwise w must have the sizes of cfg (see Validate) and ls is the
// one-element holder of the logit scale.
func layout(cfg clip.Config, s Scheme, w *clip.Weights, ls []float32) []param {
	l := &layouter{scheme: s, w: w}
	vis, txt := &clip.VisionWeights{}, &clip.TextWeights{}
	if w != nil {
		vis, txt = &w.Vision, &w.Text
	}
	// the ResNet image tower is read by clip/resnet; only the text tower is
	// laid out here
	if !(s == OpenAI && cfg.Vision.ResNet) {
		l.vision(vis, cfg.Vision, cfg.EmbedDim)
	}
	l.text(txt, cfg.Text, cfg.EmbedDim, ls)
	return l.out
}

// layouter collects the tensors of one layout call, in checkpoint order.
type layouter struct {
	scheme Scheme
	w      *clip.Weights // nil when only names and shapes are wanted
	out    []param
}

// add appends one tensor stored under name with the given shape.
func (l *layouter) add(name string, dst []float32, transpose bool, shape ...int) {
	l.out = append(l.out, param{name: name, shape: shape, dst: dst, transpose: transpose})
}

// blk is blocks[i], or empty weights when only shapes are wanted.
func (l *layouter) blk(blocks []clip.BlockWeights, i int) *clip.BlockWeights {
	if l.w == nil {
		return &clip.BlockWeights{}
	}
	return &blocks[i]
}

// block lays out one transformer block of width d and MLP width h under
// prefix, in the layouter's scheme.
func (l *layouter) block(prefix string, b *clip.BlockWeights, d, h int) {
	n := schemeNames[l.scheme]
	l.add(prefix+n.ln1+"weight", b.Ln1W, false, d)
	l.add(prefix+n.ln1+"bias", b.Ln1B, false, d)
	l.inProj(prefix, b, d)
	l.add(prefix+n.attnOut+"weight", b.OutProjW, false, d, d)
	l.add(prefix+n.attnOut+"bias", b.OutProjB, false, d)
	l.add(prefix+n.ln2+"weight", b.Ln2W, false, d)
	l.add(prefix+n.ln2+"bias", b.Ln2B, false, d)
	l.add(prefix+n.mlpIn+"weight", b.FcW, false, h, d)
	l.add(prefix+n.mlpIn+"bias", b.FcB, false, h)
	l.add(prefix+n.mlpOut+"weight", b.ProjW, false, d, h)
	l.add(prefix+n.mlpOut+"bias", b.ProjB, false, d)
}

// inProj lays out a block's attention input projection: fused q|k|v for
// OpenAI, q, k and v as separate thirds of the fused buffers for HF.
func (l *layouter) inProj(prefix string, b *clip.BlockWeights, d int) {
	if l.scheme == OpenAI {
		l.add(prefix+"attn.in_proj_weight", b.InProjW, false, 3*d, d)
		l.add(prefix+"attn.in_proj_bias", b.InProjB, false, 3*d)
		return
	}
	for i, qkv := range []string{"q", "k", "v"} {
		l.add(prefix+"self_attn."+qkv+"_proj.weight", third(b.InProjW, i, d*d), false, d, d)
		l.add(prefix+"self_attn."+qkv+"_proj.bias", third(b.InProjB, i, d), false, d)
	}
}

// third is the i-th third of a fused q/k/v buffer of n values (nil for nil).
func third(buf []float32, i, n int) []float32 {
	if buf == nil {
		return nil
	}
	return buf[i*n : (i+1)*n]
}

// vision lays out the ViT image tower and its projection.
func (l *layouter) vision(vis *clip.VisionWeights, vc clip.VisionConfig, e int) {
	n, dv := schemeNames[l.scheme], vc.Width
	l.add(n.class, vis.ClassEmb, false, dv)
	l.add(n.patch, vis.Conv1W, false, dv, 3, vc.PatchSize, vc.PatchSize)
	l.add(n.pos, vis.PosEmb, false, vc.Tokens(), dv)
	l.add(n.lnPre+"weight", vis.LnPreW, false, dv)
	l.add(n.lnPre+"bias", vis.LnPreB, false, dv)
	for i := range vc.Layers {
		l.block(fmt.Sprintf("%s%d.", n.vblocks, i), l.blk(vis.Blocks, i), dv, vc.MLPWidth)
	}
	l.add(n.lnPost+"weight", vis.LnPostW, false, dv)
	l.add(n.lnPost+"bias", vis.LnPostB, false, dv)
	l.projection(n.vproj, n.projT, vis.Proj, dv, e)
}

// text lays out the text tower, its projection and the logit scale.
func (l *layouter) text(txt *clip.TextWeights, tc clip.TextConfig, e int, ls []float32) {
	n, dt := schemeNames[l.scheme], tc.Width
	l.add(n.tok, txt.TokenEmb, false, tc.VocabSize, dt)
	l.add(n.tpos, txt.PosEmb, false, tc.ContextLength, dt)
	for i := range tc.Layers {
		l.block(fmt.Sprintf("%s%d.", n.tblocks, i), l.blk(txt.Blocks, i), dt, tc.MLPWidth)
	}
	l.add(n.lnFinal+"weight", txt.LnFinalW, false, dt)
	l.add(n.lnFinal+"bias", txt.LnFinalB, false, dt)
	l.projection(n.tproj, n.projT, txt.Proj, dt, e)
	l.add("logit_scale", ls, false)
}

// projection adds a tower's projection, [d, e] in clip.Weights, stored so
// or (transposed) as [e, d].
func (l *layouter) projection(name string, transposed bool, dst []float32, d, e int) {
	if transposed {
		l.add(name, dst, true, e, d)
		return
	}
	l.add(name, dst, false, d, e)
}

// ignorable lists tensors a scheme's checkpoints may hold that carry no
// weights (buffers recomputed by the model).
var ignorable = map[Scheme]map[string]bool{
	// OpenAI's TorchScript .pt files hold three scalar buffers that
	// clip.load drops from the state dict.
	OpenAI: {"input_resolution": true, "context_length": true, "vocab_size": true},
	HF: {
		"vision_model.embeddings.position_ids": true,
		"text_model.embeddings.position_ids":   true,
	},
}

// ParamCount is the number of parameters of a CLIP model with config cfg.
func ParamCount(cfg clip.Config) int64 {
	var n int64
	for _, p := range layout(cfg, OpenAI, nil, nil) {
		n += int64(tensor.Numel(p.shape))
	}
	return n
}

// TowerParams splits ParamCount(cfg) into the image tower (with its
// projection) and the text tower (with its projection and the logit scale).
func TowerParams(cfg clip.Config) (vision, text int64) {
	for _, p := range layout(cfg, OpenAI, nil, nil) {
		n := int64(tensor.Numel(p.shape))
		if strings.HasPrefix(p.name, "visual.") {
			vision += n
		} else {
			text += n
		}
	}
	return vision, text
}

// checkConfig rejects configurations no CLIP model can have.
func checkConfig(cfg clip.Config) error {
	vc, tc := cfg.Vision, cfg.Text
	if vc.ResNet {
		// the ResNet tower checks its own tensors; keep the text checks
		vc = clip.VisionConfig{ImageSize: max(vc.ImageSize, 1), PatchSize: 1, Width: 1, Layers: 1, Heads: 1, MLPWidth: 1}
	}
	pos := []struct {
		name string
		v    int
	}{
		{"embed dim", cfg.EmbedDim},
		{"vision image size", vc.ImageSize}, {"vision patch size", vc.PatchSize},
		{"vision width", vc.Width}, {"vision layers", vc.Layers}, {"vision heads", vc.Heads}, {"vision MLP width", vc.MLPWidth},
		{"text context length", tc.ContextLength}, {"text vocab size", tc.VocabSize},
		{"text width", tc.Width}, {"text layers", tc.Layers}, {"text heads", tc.Heads}, {"text MLP width", tc.MLPWidth},
	}
	for _, p := range pos {
		if p.v <= 0 {
			return fmt.Errorf("%s is %d, want > 0", p.name, p.v)
		}
	}
	if vc.ImageSize%vc.PatchSize != 0 {
		return fmt.Errorf("vision image size %d is not a multiple of patch size %d", vc.ImageSize, vc.PatchSize)
	}
	if vc.Width%vc.Heads != 0 {
		return fmt.Errorf("vision width %d is not a multiple of heads %d", vc.Width, vc.Heads)
	}
	if tc.Width%tc.Heads != 0 {
		return fmt.Errorf("text width %d is not a multiple of heads %d", tc.Width, tc.Heads)
	}
	return nil
}

// alloc returns zeroed weights sized for cfg (the text tower only for a
// ResNet CLIP, whose image tower clip/resnet builds).
func alloc(cfg clip.Config) *clip.Weights {
	vc, tc, e := cfg.Vision, cfg.Text, cfg.EmbedDim
	if vc.ResNet {
		vc = clip.VisionConfig{}
	}
	blocks := func(n, d, h int) []clip.BlockWeights {
		bs := make([]clip.BlockWeights, n)
		for i := range bs {
			bs[i] = clip.BlockWeights{
				Ln1W: make([]float32, d), Ln1B: make([]float32, d),
				InProjW: make([]float32, 3*d*d), InProjB: make([]float32, 3*d),
				OutProjW: make([]float32, d*d), OutProjB: make([]float32, d),
				Ln2W: make([]float32, d), Ln2B: make([]float32, d),
				FcW: make([]float32, h*d), FcB: make([]float32, h),
				ProjW: make([]float32, d*h), ProjB: make([]float32, d),
			}
		}
		return bs
	}
	dv, dt := vc.Width, tc.Width
	return &clip.Weights{
		Config: cfg,
		Vision: clip.VisionWeights{
			Conv1W:   make([]float32, dv*3*vc.PatchSize*vc.PatchSize),
			ClassEmb: make([]float32, dv),
			PosEmb:   make([]float32, vc.Tokens()*dv),
			LnPreW:   make([]float32, dv), LnPreB: make([]float32, dv),
			Blocks:  blocks(vc.Layers, dv, vc.MLPWidth),
			LnPostW: make([]float32, dv), LnPostB: make([]float32, dv),
			Proj: make([]float32, dv*e),
		},
		Text: clip.TextWeights{
			TokenEmb: make([]float32, tc.VocabSize*dt),
			PosEmb:   make([]float32, tc.ContextLength*dt),
			Blocks:   blocks(tc.Layers, dt, tc.MLPWidth),
			LnFinalW: make([]float32, dt), LnFinalB: make([]float32, dt),
			Proj: make([]float32, dt*e),
		},
	}
}

// Validate checks that w's config is sane and that every weight slice has
// the length the config implies.
func Validate(w *clip.Weights) error {
	if w == nil {
		return fmt.Errorf("checkpoint: nil weights")
	}
	if err := checkConfig(w.Config); err != nil {
		return fmt.Errorf("checkpoint: config: %w", err)
	}
	if n, want := len(w.Vision.Blocks), w.Config.Vision.Layers; n != want {
		return fmt.Errorf("checkpoint: %d vision blocks, config says %d", n, want)
	}
	if n, want := len(w.Text.Blocks), w.Config.Text.Layers; n != want {
		return fmt.Errorf("checkpoint: %d text blocks, config says %d", n, want)
	}
	for _, p := range layout(w.Config, OpenAI, w, []float32{w.LogitScale}) {
		if n := tensor.Numel(p.shape); len(p.dst) != n {
			return fmt.Errorf("checkpoint: tensor %q: %d values, shape %v needs %d", p.name, len(p.dst), p.shape, n)
		}
	}
	return nil
}

// transpose2 writes the transpose of src, a rows×cols matrix, into dst.
func transpose2(dst, src []float32, rows, cols int) {
	for r := range rows {
		for c := range cols {
			dst[c*rows+r] = src[r*cols+c]
		}
	}
}
