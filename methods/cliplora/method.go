package cliplora

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/clientbase"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/optim"
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
	// a fresh LoRA on deltas d (nil: none): the initial A, B, and d
	fresh := func(d tensor.Named) *LoRA {
		l := bind(init.Params.Clone(), cfg, s)
		if s.product() {
			l.withDeltas(cfg)
			for name, t := range d {
				copy(l.Deltas[name].Data, t.Data)
			}
		}
		return l
	}
	plan := &methods.Plan{}
	bases, err := clientbase.Bases("clip_lora", env, env.Train.Own(s.Optimizer, s.LR, s.WeightDecay, s.LocalEpochs))
	if err != nil {
		return nil, err
	}
	var clients []*client
	for _, b := range bases {
		c := &client{Base: b, env: env, s: s, init: init.Params, lora: fresh(init.Deltas)}
		clients = append(clients, c)
		plan.Clients = append(plan.Clients, c)
	}
	fa := &strategy.FedAvg{Shared: func(name string) bool { return strings.HasPrefix(name, "lora.") }, Initial: init.Params.Clone()}
	if s.product() {
		fa = &strategy.FedAvg{Shared: IsDelta, Initial: init.Deltas.Clone()}
	}
	plan.Strategy, plan.Global = fa, fa.Global
	plan.Site = func(i int) (tensor.Named, error) {
		out := clients[i].lora.Params.Clone()
		for name, t := range clients[i].lora.Deltas {
			out[name] = t.Clone()
		}
		return out, nil
	}
	// the global model: the averaged LoRA (ab), or the averaged change
	// under a fresh LoRA (product)
	plan.GlobalScorer = func() (eval.Scorer, error) {
		if s.product() {
			return newScorer(env, fresh(fa.Global())), nil
		}
		return newScorer(env, bind(fa.Global().Clone(), cfg, s)), nil
	}
	return plan, nil
}

type client struct {
	clientbase.Base
	// env is Base.Env, which the fixture harness's Scorer reads as c.env.
	env *methods.Env
	s   *Settings
	// init holds the common initial factors (read-only): under aggregate:
	// product a site restarts from them after installing the average.
	init     tensor.Named
	lora     *LoRA
	img, txt []float32
	head     clip.CosineLogits
}

// Params implements train.Learner.
func (c *client) Params() []optim.Param { return clientbase.Params(c.lora.Params, c.lora.Grads, nil) }

// Step implements train.Learner: both encoders forward and backward.
func (c *client) Step(ctx context.Context, b train.Batch) (float64, int, error) {
	env := c.Env
	labels, err := c.Batch(b)
	if err != nil {
		return 0, 0, err
	}
	prefix, eot, err := env.SpacePrompts(c.Task.TrainSpace)
	if err != nil {
		return 0, 0, err
	}
	c.lora.Attach(env.Model, b.RNG)
	c.lora.ZeroGrads()
	B, C, E := len(b.Items), len(eot), env.Model.W.Config.EmbedDim
	c.img, c.txt = Features(env.Model, env.TrainBuf, B, prefix, eot, true, c.img, c.txt)
	logits := append([]float32(nil), c.head.Forward(c.img, c.txt, B, C, E, env.Model.W.LogitScale)...)
	dl := make([]float32, B*C)
	loss := clip.CrossEntropy(logits, labels, B, C, dl)
	dImg, dTxt := make([]float32, B*E), make([]float32, C*E)
	c.head.Backward(dl, dImg, dTxt)
	Backward(env.Model, dImg, dTxt)
	methods.DetachAll(env.Model)
	correct := 0
	for k, y := range labels {
		if eval.Argmax(logits[k*C:(k+1)*C]) == y {
			correct++
		}
	}
	return loss, correct, nil
}

// Fit installs the global factors (ab) or the global change with a fresh
// LoRA (product), trains every factor and uploads the factors (ab) or each
// projection's whole change Δ + s·B·A (product).
func (c *client) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	if err := c.receive(ins.Params); err != nil {
		return federation.FitRes{}, err
	}
	m, err := c.Train(ctx, ins.Round, c)
	if err != nil {
		return federation.FitRes{}, err
	}
	up := c.lora.Params.Clone()
	if c.s.product() {
		up = c.lora.Product(c.Env.Model.W.Config)
	}
	return c.Fitted(up, m), nil
}

// receive installs the server's tensors: the factors (ab), or the averaged
// change as the frozen deltas with the LoRA restarted from the common
// initial factors (product), after which the site's model is exactly the
// average.
func (c *client) receive(in tensor.Named) error {
	into := c.lora.Params
	if c.s.product() {
		into = c.lora.Deltas
	}
	if err := c.Install(into, in, nil); err != nil {
		return err
	}
	if c.s.product() && len(in) > 0 {
		for name, p := range c.lora.Params {
			copy(p.Data, c.init[name].Data)
		}
	}
	return nil
}

// Evaluate scores the client's LoRA on its evaluation sets.
func (c *client) Evaluate(ctx context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	return c.Base.Evaluate(ctx, newScorer(c.Env, c.lora))
}

// scorer is CLIP with a LoRA attached while it scores a batch.
type scorer struct {
	env  *methods.Env
	lora *LoRA
	txt  map[int][]float32
	img  []float32
}

func newScorer(env *methods.Env, l *LoRA) *scorer {
	return &scorer{env: env, lora: l, txt: map[int][]float32{}}
}

// Logits implements eval.Scorer.
func (s *scorer) Logits(space int, prefix []float32, B int) ([]float32, error) {
	m := s.env.Model
	s.lora.Attach(m, nil)
	defer methods.DetachAll(m)
	E := m.W.Config.EmbedDim
	sc := methods.CosineScorer{Model: m,
		Text: func(space int) ([]float32, error) {
			if f, ok := s.txt[space]; ok {
				return f, nil
			}
			p, eot, err := s.env.SpacePrompts(space)
			if err != nil {
				return nil, err
			}
			t := m.Text
			x, T := clip.TruncatePrefix(p, eot, len(eot), t.Cfg.ContextLength, t.Cfg.Width)
			pt := t.Stack.Forward(x, len(eot), T, 0, len(t.Stack.Blocks), eot, false)
			f := make([]float32, len(eot)*E)
			t.HeadForward(f, pt, len(eot))
			s.txt[space] = f
			return f, nil
		},
		Image: func(prefix []float32, B int) []float32 {
			v := m.Vision
			pooled := v.Stack.Forward(prefix, B, v.Cfg.Tokens(), 0, len(v.Stack.Blocks), clip.ClassPool(B), false)
			s.img = nn.Grow(s.img, B*E)
			v.HeadForward(s.img, pooled, B)
			return s.img
		}}
	return sc.Logits(space, prefix, B)
}

// State holds the factors, the optimizer state and the random generator
// (which also draws the dropout masks).
func (c *client) State() (tensor.Named, error) {
	return c.SaveState(c.saved()...)
}

// saved lists the tensors a State holds: the factors and the frozen deltas.
func (c *client) saved() []clientbase.Saved {
	return []clientbase.Saved{{Prefix: "param/", Tensors: c.lora.Params}, {Prefix: "delta/", Tensors: c.lora.Deltas}}
}

// LoadState restores a State.
func (c *client) LoadState(st tensor.Named) error {
	return c.RestoreState(st, c.saved()...)
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
