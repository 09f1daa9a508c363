package cliplora

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/tensor"
)

func init() { methods.Register(Method{}) }

// Settings is the clip_lora config section (baselines.md §6).
type Settings struct {
	Rank    int     `yaml:"rank"`    // r (2)
	Alpha   float64 `yaml:"alpha"`   // α (1)
	Dropout float64 `yaml:"dropout"` // on the LoRA input, training only (0.25)
	// Scale is sqrt (α/√r, the spec) or linear (α/r, standard LoRA).
	Scale string `yaml:"scale"`
	// Aggregate is ab (FedAvg of A and B separately, the federated
	// baselines' choice) or product (FedAvg of each projection's whole
	// change Δ + s·B·A; see the package doc).
	Aggregate string `yaml:"aggregate"`
	// Optimizer, LR, WeightDecay and LocalEpochs, when set, replace the
	// run's optimizer.name, optimizer.lr, optimizer.weight_decay and
	// federation.local_epochs for this method (CLIP-LoRA's recipe is
	// AdamW, lr 2e-4, weight decay 1e-2); empty or 0 keeps the run's.
	Optimizer   string  `yaml:"optimizer"`
	LR          float64 `yaml:"lr"`
	WeightDecay float64 `yaml:"weight_decay"`
	LocalEpochs int     `yaml:"local_epochs"`
}

// Aggregation choices.
const (
	AggregateAB      = "ab"
	AggregateProduct = "product"
)

func (s *Settings) product() bool { return s.Aggregate == AggregateProduct }

// Check implements config.Section.
func (s *Settings) Check(c *config.Checker) {
	c.AtLeast("rank", s.Rank, 1)
	c.AtMost("rank", s.Rank, 256)
	c.Positive("alpha", s.Alpha)
	if c.Finite("dropout", s.Dropout) && (s.Dropout < 0 || s.Dropout >= 1) {
		c.Fail("dropout", "%v not in [0, 1)", s.Dropout)
	}
	c.OneOf("scale", s.Scale, "sqrt", "linear")
	if s.Aggregate != "" { // sections saved before the option read as ab
		c.OneOf("aggregate", s.Aggregate, AggregateAB, AggregateProduct)
	}
	if s.Optimizer != "" {
		c.OneOf("optimizer", s.Optimizer, "sgd", "adamw")
	}
	c.NonNegative("lr", s.LR)
	c.NonNegative("weight_decay", s.WeightDecay)
	c.AtLeast("local_epochs", s.LocalEpochs, 0)
	c.AtMost("local_epochs", s.LocalEpochs, config.MaxOwnLocalEpochs)
}

func (s *Settings) scale() float32 {
	if s.Scale == "linear" {
		return float32(s.Alpha / float64(s.Rank))
	}
	return float32(s.Alpha / math.Sqrt(float64(s.Rank)))
}

// Method is federated CLIP-LoRA for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "clip_lora", Trains: "LoRA (rank r) on q, k, v of every block of both encoders",
		Shares: "A and B of every LoRA (FedAvg, weights n_i; aggregate: product averages Δ + s·B·A exactly): one global model",
		Loader: methods.TorchLoader, // MaxZanella/CLIP-LoRA: datasets/utils.py drop_last=False
		Paper:  "Zanella & Ben Ayed, Low-Rank Few-Shot Adaptation of Vision-Language Models (2024), federated as in the pFedMMA paper"}
}

// DefaultConfig implements methods.Method.
func (Method) DefaultConfig() config.Section {
	return &Settings{Rank: 2, Alpha: 1, Dropout: 0.25, Scale: "sqrt", Aggregate: AggregateAB}
}

// Depth implements methods.Method: the prefix is the input of block 1.
func (Method) Depth(config.Section, int) (int, error) { return 1, nil }

func settings(sec config.Section) (*Settings, error) {
	s, ok := sec.(*Settings)
	if !ok || s == nil {
		return nil, fmt.Errorf("clip_lora: config section is %T, want *cliplora.Settings", sec)
	}
	return s, nil
}

// LoRA is one client's LoRA on a model: its parameters, gradients and the
// per-block adapters that Attach installs.
type LoRA struct {
	Params, Grads tensor.Named
	// Deltas are the frozen dense changes [D, D] of every projection under
	// aggregate: product (DeltaName); nil under aggregate: ab.
	Deltas   tensor.Named
	scale    float32
	vis, txt []*blockLoRA
}

// towersOf lists the encoders LoRA adapts, in draw order.
func towersOf(c clip.Config) []tower {
	return []tower{{"visual", c.Vision.Layers, c.Vision.Width}, {"text", c.Text.Layers, c.Text.Width}}
}

func (l *LoRA) blocks(tw string) []*blockLoRA {
	if tw == "text" {
		return l.txt
	}
	return l.vis
}

// withDeltas gives l zero deltas bound to its blocks (aggregate: product).
func (l *LoRA) withDeltas(c clip.Config) *LoRA {
	l.Deltas = tensor.Named{}
	for _, tw := range towersOf(c) {
		for j, b := range l.blocks(tw.name) {
			for k, part := range Parts {
				t := tensor.New(tw.width, tw.width)
				l.Deltas[DeltaName(tw.name, j, part)] = t
				b.delta[k] = t.Data
			}
		}
	}
	return l
}

// Product returns every projection's whole change Δ + s·B·A [D, D] (Δ
// zero without deltas), under the DeltaName names: what a site uploads
// under aggregate: product.
func (l *LoRA) Product(c clip.Config) tensor.Named {
	out := tensor.Named{}
	for _, tw := range towersOf(c) {
		D := tw.width
		for j, b := range l.blocks(tw.name) {
			for k, part := range Parts {
				t := tensor.New(D, D)
				if b.delta[k] != nil {
					copy(t.Data, b.delta[k])
				}
				gemm.Sgemm(false, false, D, D, b.R, l.scale, b.B[k], b.R, b.A[k], D, 1, t.Data, D) // += s·B·A
				out[DeltaName(tw.name, j, part)] = t
			}
		}
	}
	return out
}

// New makes LoRA factors for model m (A drawn from rng, B zero).
func New(m *clip.Model, s *Settings, rng *rand.Rand) *LoRA {
	c := m.W.Config
	p := tensor.Named{}
	initParams(p, towersOf(c), s.Rank, rng)
	return bind(p, c, s)
}

// bind builds the block adapters over parameters p.
func bind(p tensor.Named, c clip.Config, s *Settings) *LoRA {
	l := &LoRA{Params: p, Grads: tensor.Named{}, scale: s.scale()}
	for name, t := range p {
		l.Grads[name] = tensor.New(t.Shape...)
	}
	mk := func(tower string, L, D int) []*blockLoRA {
		var out []*blockLoRA
		for j := 0; j < L; j++ {
			b := &blockLoRA{D: D, R: s.Rank, scale: s.scale(), dropout: s.Dropout}
			for k, part := range Parts {
				b.A[k], b.B[k] = p[Name(tower, j, part, "A")].Data, p[Name(tower, j, part, "B")].Data
				b.dA[k], b.dB[k] = l.Grads[Name(tower, j, part, "A")].Data, l.Grads[Name(tower, j, part, "B")].Data
			}
			out = append(out, b)
		}
		return out
	}
	l.vis = mk("visual", c.Vision.Layers, c.Vision.Width)
	l.txt = mk("text", c.Text.Layers, c.Text.Width)
	return l
}

// Attach installs this LoRA in every block of both encoders (and removes
// other adapters).
func (l *LoRA) Attach(m *clip.Model, rng *rand.Rand) {
	methods.DetachAll(m)
	for j, b := range m.Vision.Stack.Blocks {
		l.vis[j].rng = rng
		b.QKV = l.vis[j]
	}
	for j, b := range m.Text.Stack.Blocks {
		l.txt[j].rng = rng
		b.QKV = l.txt[j]
	}
}

// ZeroGrads clears the gradients.
func (l *LoRA) ZeroGrads() {
	for _, g := range l.Grads {
		clear(g.Data)
	}
}

// Features runs both encoders from their block-1 prefixes: image features
// [B, E] of prefix [B, T, Dv] and text features [C, E] of the class-prompt
// prefix textPrefix [C, ctx, Dt] (cut after the last EOT). With train set
// the activations are kept for Backward.
func Features(m *clip.Model, prefix []float32, B int, textPrefix []float32, eot []int, train bool, img, txt []float32) ([]float32, []float32) {
	v, t := m.Vision, m.Text
	E := m.W.Config.EmbedDim
	pooled := v.Stack.Forward(prefix, B, v.Cfg.Tokens(), 0, len(v.Stack.Blocks), clip.ClassPool(B), train)
	img = nn.Grow(img, B*E)
	v.HeadForward(img, pooled, B)
	C := len(eot)
	x, T := clip.TruncatePrefix(textPrefix, eot, C, t.Cfg.ContextLength, t.Cfg.Width)
	pt := t.Stack.Forward(x, C, T, 0, len(t.Stack.Blocks), eot, train)
	txt = nn.Grow(txt, C*E)
	t.HeadForward(txt, pt, C)
	return img, txt
}

// Backward propagates the gradients of the features of the last train
// Features call through both encoders into the LoRA factors.
func Backward(m *clip.Model, dImg, dTxt []float32) {
	m.Vision.Stack.Backward(nil, m.Vision.HeadBackward(dImg))
	m.Text.Stack.Backward(nil, m.Text.HeadBackward(dTxt))
}

// Build implements methods.Method: every client starts from the same
// seeded LoRA; the server averages A and B.
func (Method) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	if env.Start != 1 {
		return nil, fmt.Errorf("clip_lora: needs the prefixes of block 1, the run caches depth %d", env.Start)
	}
	cfg := env.Model.W.Config
	init := New(env.Model, s, rand.New(rand.NewPCG(env.Seed, 0x10a)))
	if s.product() {
		init.withDeltas(cfg)
	}
	if env.Init != nil {
		for name, t := range init.Params {
			src, ok := env.Init[name]
			if !ok || !tensor.SameShape(src.Shape, t.Shape) {
				return nil, fmt.Errorf("clip_lora initial parameters: no %q of shape %v", name, t.Shape)
			}
			copy(t.Data, src.Data)
		}
		for name, t := range init.Deltas { // optional: zero when not given
			if src, ok := env.Init[name]; ok {
				if !tensor.SameShape(src.Shape, t.Shape) {
					return nil, fmt.Errorf("clip_lora initial parameters: %q has shape %v, want %v", name, src.Shape, t.Shape)
				}
				copy(t.Data, src.Data)
			}
		}
	}
	shared := func(name string) bool { return strings.HasPrefix(name, "lora.") }
	if s.product() {
		shared = IsDelta
	}
	opts := env.Train.Own(s.Optimizer, s.LR, s.WeightDecay, s.LocalEpochs)
	return client.Build(env, &client.Spec{Name: "clip_lora", Input: client.Prefixes, NoPrompts: true, Shared: shared, Train: &opts,
		NewLearner: func(space int, _ []int) (client.Learner, error) {
			l := bind(init.Params.Clone(), cfg, s)
			if s.product() {
				l.withDeltas(cfg)
			}
			return &learner{env: env, lora: l, space: space}, nil
		},
		Strategy: func(p tensor.Named) federation.Strategy {
			if s.product() {
				return &strategy.FedAvg{Shared: IsDelta, Initial: init.Deltas.Clone()}
			}
			return &strategy.FedAvg{Shared: shared, Initial: p.Clone()}
		},
		Site: func(c *client.Client) (any, error) { return newSite(c, s, init.Deltas), nil }})
}

// Predictor implements methods.Method: the site's LoRA on the full model.
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	l := New(pe.Model, s, rand.New(rand.NewPCG(0, 0)))
	for name := range saved {
		if IsDelta(name) {
			l.withDeltas(pe.Model.W.Config) // a site of aggregate: product
			break
		}
	}
	for _, ps := range []tensor.Named{l.Params, l.Deltas} {
		for name, t := range ps {
			src, ok := saved[name]
			if !ok || !tensor.SameShape(src.Shape, t.Shape) {
				return nil, fmt.Errorf("clip_lora: saved site lacks %q of shape %v", name, t.Shape)
			}
			copy(t.Data, src.Data)
		}
	}
	return predictor{pe: pe, l: l}, nil
}

type predictor struct {
	pe methods.PredictEnv
	l  *LoRA
}

func (p predictor) Logits(pixels []float32, B int, classes []string) ([]float32, error) {
	m := p.pe.Model
	tokens, err := p.pe.Tokens(classes)
	if err != nil {
		return nil, err
	}
	p.l.Attach(m, nil)
	defer methods.DetachAll(m)
	img := append([]float32(nil), m.EncodeImage(pixels, B)...)
	txt, err := m.EncodeText(tokens, len(classes))
	if err != nil {
		return nil, err
	}
	return clip.Logits(img, txt, B, len(classes), m.W.Config.EmbedDim, m.W.LogitScale), nil
}
