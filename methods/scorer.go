package methods

import (
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/nn"
)

// CosineScorer scores with exp(logit_scale)·cos between image features of
// prefixes and per-space text features: the classifier of every method whose
// logits are CLIP's.
type CosineScorer struct {
	Model *clip.Model
	Text  func(space int) ([]float32, error)
	Image func(prefix []float32, B int) []float32
}

// Logits implements eval.Scorer.
func (s CosineScorer) Logits(space int, prefix []float32, B int) ([]float32, error) {
	txt, err := s.Text(space)
	if err != nil {
		return nil, err
	}
	txt = append([]float32(nil), txt...) // the image pass may reuse the text buffers
	img := s.Image(prefix, B)
	E := s.Model.W.Config.EmbedDim
	return clip.Logits(img, txt, B, len(txt)/E, E, s.Model.W.LogitScale), nil
}

var _ eval.Scorer = CosineScorer{}

// DetachAll removes every adapter (and LoRA) from the model.
func DetachAll(m *clip.Model) {
	m.Vision.EmbedAdapter, m.Text.EmbedAdapter = nil, nil
	for _, b := range m.Vision.Stack.Blocks {
		b.Adapter, b.QKV = nil, nil
	}
	for _, b := range m.Text.Stack.Blocks {
		b.Adapter, b.QKV = nil, nil
	}
}

// FrozenScorer is zero-shot CLIP run from the cached prefixes (exactly the
// full encoders, no adapters).
type FrozenScorer struct {
	Env   *Env
	txt   map[int][]float32
	feat  []float32
	split []float32 // block Start's frozen outputs of split records
}

// TextFeatures returns the frozen text features [C, E] of a label space.
func (z *FrozenScorer) TextFeatures(space int) ([]float32, error) {
	if f, ok := z.txt[space]; ok {
		return f, nil
	}
	p, eot, err := z.Env.SpacePrompts(space)
	if err != nil {
		return nil, err
	}
	m := z.Env.Model
	DetachAll(m)
	t := m.Text
	C := len(eot)
	x, T := p, t.Cfg.ContextLength
	start := z.Env.TextStart()
	if start == 0 {
		x = t.EmbedForward(p, C)
	} else {
		x, T = clip.TruncatePrefix(p, eot, C, T, t.Cfg.Width)
	}
	pooled := t.Stack.Forward(x, C, T, max(start-1, 0), len(t.Stack.Blocks), eot, false)
	f := make([]float32, C*m.W.Config.EmbedDim)
	t.HeadForward(f, pooled, C)
	if z.txt == nil {
		z.txt = map[int][]float32{}
	}
	z.txt[space] = f
	return f, nil
}

// ImageFeatures returns frozen image features [B, E] of cached prefixes.
func (z *FrozenScorer) ImageFeatures(prefix []float32, B int) []float32 {
	m := z.Env.Model
	E := m.W.Config.EmbedDim
	switch z.Env.Start {
	case Features:
		return prefix[:B*E]
	case TokenFeatures:
		T := m.W.Config.Vision.FeatureTokens()
		z.feat = nn.Grow(z.feat, B*E)
		for b := 0; b < B; b++ {
			copy(z.feat[b*E:(b+1)*E], prefix[b*T*E:b*T*E+E])
		}
		return z.feat
	case Embeddings:
		n := z.Env.Prefixer.RecordLen()
		TD := n - 2*E
		z.feat = nn.Grow(z.feat, B*E)
		for b := 0; b < B; b++ {
			copy(z.feat[b*E:(b+1)*E], prefix[b*n+TD:b*n+TD+E])
		}
		return z.feat
	}
	DetachAll(m)
	v := m.Vision
	from := max(z.Env.Start-1, 0)
	if z.Env.Split() {
		// block Start's frozen output is in the record: run from the next
		z.split = clip.SplitOutputs(prefix, B, v.Cfg.Tokens(), v.Cfg.Width, z.split)
		prefix, from = z.split, z.Env.Start
	}
	pooled := v.Stack.Forward(prefix, B, v.Cfg.Tokens(), from, len(v.Stack.Blocks), clip.ClassPool(B), false)
	z.feat = nn.Grow(z.feat, B*m.W.Config.EmbedDim)
	v.HeadForward(z.feat, pooled, B)
	return z.feat
}

// Logits implements eval.Scorer: exp(logit_scale)·cos.
func (z *FrozenScorer) Logits(space int, prefix []float32, B int) ([]float32, error) {
	txt, err := z.TextFeatures(space)
	if err != nil {
		return nil, err
	}
	img := z.ImageFeatures(prefix, B)
	C := len(txt) / z.Env.Model.W.Config.EmbedDim
	return clip.Logits(img, txt, B, C, z.Env.Model.W.Config.EmbedDim, z.Env.Model.W.LogitScale), nil
}
