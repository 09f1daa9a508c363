package cliplora

import (
	"fmt"
	"math/rand/v2"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/tensor"
)

// learner is a LoRA for one label space, shared by the clients: a client
// loads its factors (and, under aggregate: product, its deltas) into it
// before each use.
type learner struct {
	env   *methods.Env
	lora  *LoRA
	space int
	// rng draws the dropout masks of the batch being trained.
	rng      *rand.Rand
	img, txt []float32
	head     clip.CosineLogits
	// text are the space's text features of the loaded LoRA (Prepare).
	text []float32
}

func (l *learner) Params() tensor.Named { return l.lora.Params }
func (l *learner) Grads() tensor.Named  { return l.lora.Grads }

// Step implements client.Learner: both encoders forward and backward.
func (l *learner) Step(prefix []float32, labels []int) (float64, map[string]float64, []float32, error) {
	env := l.env
	tp, eot, err := env.SpacePrompts(l.space)
	if err != nil {
		return 0, nil, nil, err
	}
	l.lora.Attach(env.Model, l.rng)
	l.lora.ZeroGrads()
	B, C, E := len(labels), len(eot), env.Model.W.Config.EmbedDim
	l.img, l.txt = Features(env.Model, prefix, B, tp, eot, true, l.img, l.txt)
	logits := append([]float32(nil), l.head.Forward(l.img, l.txt, B, C, E, env.Model.W.LogitScale)...)
	dl := make([]float32, B*C)
	loss := clip.CrossEntropy(logits, labels, B, C, dl)
	dImg, dTxt := make([]float32, B*E), make([]float32, C*E)
	l.head.Backward(dl, dImg, dTxt)
	Backward(env.Model, dImg, dTxt)
	methods.DetachAll(env.Model)
	return loss, nil, logits, nil
}

// Prepare implements client.Learner: the space's text features through
// the loaded LoRA.
func (l *learner) Prepare() error {
	m := l.env.Model
	l.lora.Attach(m, nil)
	defer methods.DetachAll(m)
	p, eot, err := l.env.SpacePrompts(l.space)
	if err != nil {
		return err
	}
	t := m.Text
	x, T := clip.TruncatePrefix(p, eot, len(eot), t.Cfg.ContextLength, t.Cfg.Width)
	pt := t.Stack.Forward(x, len(eot), T, 0, len(t.Stack.Blocks), eot, false)
	l.text = make([]float32, len(eot)*m.W.Config.EmbedDim)
	t.HeadForward(l.text, pt, len(eot))
	return nil
}

// Logits implements client.Learner: CLIP with the LoRA attached.
func (l *learner) Logits(prefix []float32, B int) ([]float32, error) {
	m := l.env.Model
	l.lora.Attach(m, nil)
	defer methods.DetachAll(m)
	E := m.W.Config.EmbedDim
	sc := methods.CosineScorer{Model: m,
		Text: func(int) ([]float32, error) { return l.text, nil },
		Image: func(prefix []float32, B int) []float32 {
			v := m.Vision
			pooled := v.Stack.Forward(prefix, B, v.Cfg.Tokens(), 0, len(v.Stack.Blocks), clip.ClassPool(B), false)
			l.img = nn.Grow(l.img, B*E)
			v.HeadForward(l.img, pooled, B)
			return l.img
		}}
	return sc.Logits(l.space, prefix, B)
}

// site is a client's own LoRA: its factors (the client's P) and, under
// aggregate: product, the frozen deltas (the averaged change it installed).
type site struct {
	c       *client.Client
	product bool
	cfg     clip.Config
	// init holds the common initial factors (read-only): under aggregate:
	// product a site restarts from them after installing the average.
	init tensor.Named
	lora *LoRA
}

// newSite binds a LoRA over c's parameters, with the initial deltas under
// aggregate: product.
func newSite(c *client.Client, s *Settings, deltas tensor.Named) *site {
	cfg := c.Env.Model.W.Config
	st := &site{c: c, product: s.product(), cfg: cfg, init: c.P.Clone(), lora: bind(c.P, cfg, s)}
	if st.product {
		st.lora.withDeltas(cfg)
		for name, t := range deltas {
			copy(st.lora.Deltas[name].Data, t.Data)
		}
	}
	return st
}

// load gives learner l the site's deltas.
func (s *site) load(l *learner) {
	for name, t := range s.lora.Deltas {
		copy(l.lora.Deltas[name].Data, t.Data)
	}
}

// BeforeStep implements client.BeforeStepper: the learner draws the
// batch's dropout masks from its generator, with the site's deltas.
func (s *site) BeforeStep(b train.Batch) error {
	l, err := s.c.Learner()
	if err != nil {
		return err
	}
	l.(*learner).rng = b.RNG
	s.load(l.(*learner))
	return nil
}

// Prepare implements client.Preparer: the site's deltas, then the text
// features.
func (s *site) Prepare(l client.Learner) error {
	s.load(l.(*learner))
	return l.Prepare()
}

// Receive implements client.Receiver: the factors (ab), or the averaged
// change as the frozen deltas with the LoRA restarted from the common
// initial factors (product), after which the site's model is exactly the
// average.
func (s *site) Receive(in tensor.Named) error {
	if !s.product {
		return s.c.ReceiveShared(in)
	}
	for name, t := range in {
		dst, ok := s.lora.Deltas[name]
		if !ok {
			return fmt.Errorf("clip_lora client %d: received unexpected tensor %q", s.c.Task.ID, name)
		}
		if !tensor.SameShape(dst.Shape, t.Shape) {
			return fmt.Errorf("clip_lora client %d: received %q with shape %v, want %v", s.c.Task.ID, name, t.Shape, dst.Shape)
		}
		copy(dst.Data, t.Data)
	}
	if len(in) > 0 {
		for name, p := range s.c.P {
			copy(p.Data, s.init[name].Data)
		}
	}
	return nil
}

// Upload implements client.Uploader: the factors (ab) or each
// projection's whole change Δ + s·B·A (product).
func (s *site) Upload() tensor.Named {
	if s.product {
		return s.lora.Product(s.cfg)
	}
	return s.c.P.Clone()
}

// SaveExtra implements client.ExtraState: the frozen deltas, as
// "delta/<name>".
func (s *site) SaveExtra() (tensor.Named, error) {
	st := tensor.Named{}
	for name, t := range s.lora.Deltas {
		st["delta/"+name] = t.Clone()
	}
	return st, nil
}

// LoadExtra implements client.ExtraState.
func (s *site) LoadExtra(st tensor.Named) error {
	for name, p := range s.lora.Deltas {
		t, ok := st["delta/"+name]
		if !ok || !tensor.SameShape(t.Shape, p.Shape) {
			return fmt.Errorf("clip_lora client %d state: no delta/%s of shape %v", s.c.Task.ID, name, p.Shape)
		}
		copy(p.Data, t.Data)
	}
	return nil
}

// Kept implements client.Keeper: the frozen deltas beside the factors.
func (s *site) Kept() (tensor.Named, error) { return s.lora.Deltas.Clone(), nil }
