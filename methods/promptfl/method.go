package promptfl

import (
	"context"
	"fmt"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

func init() { methods.Register(Method{}) }

// Settings is the promptfl config section.
type Settings struct {
	// NCtx is the number of learned context tokens (CoOp's n_ctx; 16).
	NCtx int `yaml:"n_ctx"`
	// ClassSpecific learns one context per class (CoOp's CSC; false).
	ClassSpecific bool `yaml:"class_specific"`
	// InitStd is the standard deviation of the context's N(0, σ²) init (0.02).
	InitStd float64 `yaml:"init_std"`
	// ProxMu is FedProx's μ (≥ 0); 0 is plain FedAvg.
	ProxMu float64 `yaml:"prox_mu"`
}

// Check implements config.Section.
func (s *Settings) Check(c *config.Checker) {
	c.AtLeast("n_ctx", s.NCtx, 1)
	c.AtMost("n_ctx", s.NCtx, 64)
	c.NonNegative("init_std", s.InitStd)
	c.NonNegative("prox_mu", s.ProxMu)
}

func (s *Settings) config(seed uint64) Config {
	return Config{NCtx: s.NCtx, ClassSpecific: s.ClassSpecific, InitStd: s.InitStd, ProxMu: s.ProxMu, Seed: seed}
}

// Method is PromptFL for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "promptfl", Trains: "a CoOp text context (n_ctx vectors) on frozen CLIP",
		Shares: "the context (FedAvg, weights n_i; optional FedProx μ)",
		Paper:  "Guo et al., PromptFL: Let Federated Participants Cooperatively Learn Prompts Instead of Models (2023)"}
}

// DefaultConfig implements methods.Method.
func (Method) DefaultConfig() config.Section {
	c := DefaultConfig()
	return &Settings{NCtx: c.NCtx, InitStd: c.InitStd}
}

// Depth implements methods.Method: the image encoder is frozen whole.
func (Method) Depth(config.Section, int) (int, error) { return methods.Features, nil }

func settings(sec config.Section) (*Settings, error) {
	s, ok := sec.(*Settings)
	if !ok || s == nil {
		return nil, fmt.Errorf("promptfl: config section is %T, want *promptfl.Settings", sec)
	}
	return s, nil
}

// placeholder is CoOp's prompt prefix of n "X" words.
func placeholder(n int) string { return strings.TrimSpace(strings.Repeat("X ", n)) }

// spaces keeps one learner per label space, shared by every client (they
// run one at a time and load their own context before using it).
type spaces struct {
	env *methods.Env
	cfg Config
	by  map[int]*Learner
}

func (s *spaces) get(space int) (*Learner, error) {
	if l, ok := s.by[space]; ok {
		return l, nil
	}
	tokens, err := s.env.ClassPromptTokens(space, placeholder(s.cfg.NCtx))
	if err != nil {
		return nil, err
	}
	l, err := New(s.env.Model, tokens, s.cfg)
	if err != nil {
		return nil, err
	}
	s.by[space] = l
	return l, nil
}

// Build implements methods.Method.
func (Method) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	if env.Start != methods.Features {
		return nil, fmt.Errorf("promptfl: needs cached image features, the run caches depth %d", env.Start)
	}
	sp := &spaces{env: env, cfg: s.config(env.Seed), by: map[int]*Learner{}}
	first, err := sp.get(env.Task.Clients[0].TrainSpace)
	if err != nil {
		return nil, err
	}
	init := first.Params().Clone() // drawn from the run seed
	if env.Init != nil {
		if err := prompt.Load(init, env.Init); err != nil {
			return nil, fmt.Errorf("promptfl initial context: %w", err)
		}
	}
	plan := &methods.Plan{}
	var clients []*client
	for i := range env.Task.Clients {
		t := &env.Task.Clients[i]
		loop, err := train.NewLoop(env.Train, len(t.Train), env.Seed, uint64(t.ID)+1, fmt.Sprintf("promptfl client %d", t.ID))
		if err != nil {
			return nil, err
		}
		c := &client{env: env, task: t, sp: sp, ctx: init[ParamCtx].Clone(), loop: loop}
		clients = append(clients, c)
		plan.Clients = append(plan.Clients, c)
	}
	fa := &strategy.FedAvg{Shared: federation.Names(ParamCtx), Initial: init}
	plan.Strategy = fa
	plan.Global = fa.Global
	plan.Site = func(i int) (tensor.Named, error) { return tensor.Named{ParamCtx: clients[i].ctx.Clone()}, nil }
	return plan, nil
}

// client is one PromptFL site: its context, optimizer and random state.
type client struct {
	env    *methods.Env
	task   *protocol.ClientTask
	sp     *spaces
	ctx    *tensor.Tensor
	loop   *train.Loop
	l      *Learner // the learner of the round's training space
	labels []int
}

func (c *client) ID() int          { return c.task.ID }
func (c *client) NumExamples() int { return len(c.task.Train) }

// Params implements train.Learner: the client's context with the shared
// learner's gradient buffer.
func (c *client) Params() []optim.Param {
	return []optim.Param{{Name: ParamCtx, Value: c.ctx.Data, Grad: c.l.Grads()[ParamCtx].Data}}
}

// Step implements train.Learner on cached image features.
func (c *client) Step(ctx context.Context, b train.Batch) (float64, int, error) {
	if err := c.env.TrainBatch(c.task, b.Items, b.RNG, b.Round, b.Epoch); err != nil {
		return 0, 0, err
	}
	c.labels = c.labels[:0]
	for _, k := range b.Items {
		c.labels = append(c.labels, c.task.Labels[k])
	}
	copy(c.l.Params()[ParamCtx].Data, c.ctx.Data)
	loss, _, logits, err := c.l.Step(c.env.TrainBuf, c.labels)
	if err != nil {
		return 0, 0, err
	}
	C := len(logits) / len(c.labels)
	correct := 0
	for k, y := range c.labels {
		if eval.Argmax(logits[k*C:(k+1)*C]) == y {
			correct++
		}
	}
	return loss, correct, nil
}

// Fit loads the global context, trains it locally and uploads it.
func (c *client) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	if g, ok := ins.Params[ParamCtx]; ok {
		if !tensor.SameShape(g.Shape, c.ctx.Shape) {
			return federation.FitRes{}, fmt.Errorf("client %d: received %q with shape %v, want %v", c.task.ID, ParamCtx, g.Shape, c.ctx.Shape)
		}
		copy(c.ctx.Data, g.Data)
	}
	for name := range ins.Params {
		if name != ParamCtx {
			return federation.FitRes{}, fmt.Errorf("client %d: received unexpected tensor %q", c.task.ID, name)
		}
	}
	l, err := c.sp.get(c.task.TrainSpace)
	if err != nil {
		return federation.FitRes{}, err
	}
	c.l = l
	if err := l.SetGlobal(nil); err != nil {
		return federation.FitRes{}, err
	}
	if c.sp.cfg.ProxMu > 0 {
		if err := l.SetGlobal(tensor.Named{ParamCtx: c.ctx}); err != nil {
			return federation.FitRes{}, err
		}
	}
	bar := c.env.StepBar(c.loop.Batches(), fmt.Sprintf("client %d batch", c.task.ID))
	defer bar.Finish()
	c.loop.Progress = func(n int) { bar.AddItems(1, n) }
	m, err := c.loop.Run(ctx, ins.Round, c)
	if err != nil {
		return federation.FitRes{}, err
	}
	return federation.FitRes{Params: tensor.Named{ParamCtx: c.ctx.Clone()}, NumExamples: len(c.task.Train), Metrics: m}, nil
}

// Evaluate scores the client's context on its evaluation sets.
func (c *client) Evaluate(ctx context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	txt := map[int][]float32{}
	sc := methods.CosineScorer{Model: c.env.Model,
		Text: func(space int) ([]float32, error) {
			if f, ok := txt[space]; ok {
				return f, nil
			}
			l, err := c.sp.get(space)
			if err != nil {
				return nil, err
			}
			copy(l.Params()[ParamCtx].Data, c.ctx.Data)
			f, err := l.TextFeatures()
			if err != nil {
				return nil, err
			}
			txt[space] = append([]float32(nil), f...)
			return txt[space], nil
		},
		Image: func(prefix []float32, B int) []float32 { return prefix },
	}
	m, err := c.env.Evaluate(ctx, sc, c.task)
	return federation.EvaluateRes{Metrics: m, NumExamples: len(c.task.Train)}, err
}

// State holds the context, the optimizer state and the random generator.
func (c *client) State() (tensor.Named, error) {
	st, err := c.loop.State()
	if err != nil {
		return nil, err
	}
	st["param/"+ParamCtx] = c.ctx.Clone()
	return st, nil
}

// LoadState restores a State.
func (c *client) LoadState(st tensor.Named) error {
	t, ok := st["param/"+ParamCtx]
	if !ok || !tensor.SameShape(t.Shape, c.ctx.Shape) {
		return fmt.Errorf("client %d state: no %s of shape %v", c.task.ID, ParamCtx, c.ctx.Shape)
	}
	copy(c.ctx.Data, t.Data)
	return c.loop.LoadState(st)
}

// Predictor implements methods.Method: the site's context on the frozen
// model.
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	ctx, ok := saved[ParamCtx]
	if !ok {
		return nil, fmt.Errorf("promptfl: saved site lacks %q", ParamCtx)
	}
	return predictor{pe: pe, cfg: s.config(0), ctx: ctx}, nil
}

type predictor struct {
	pe  methods.PredictEnv
	cfg Config
	ctx *tensor.Tensor
}

func (p predictor) Logits(pixels []float32, B int, classes []string) ([]float32, error) {
	m := p.pe.Model
	var tokens []int
	for _, c := range classes {
		ids, err := p.pe.Tok.Tokenize(placeholder(p.cfg.NCtx)+" "+strings.ReplaceAll(c, "_", " ")+".", m.W.Config.Text.ContextLength, false)
		if err != nil {
			return nil, err
		}
		tokens = append(tokens, ids...)
	}
	l, err := New(m, tokens, p.cfg)
	if err != nil {
		return nil, err
	}
	if err := prompt.Load(l.Params(), tensor.Named{ParamCtx: p.ctx}); err != nil {
		return nil, err
	}
	txt, err := l.TextFeatures()
	if err != nil {
		return nil, err
	}
	txt = append([]float32(nil), txt...)
	img := m.EncodeImage(pixels, B)
	E := m.W.Config.EmbedDim
	return clip.Logits(img, txt, B, len(classes), E, m.W.LogitScale), nil
}

// SettingsFrom implements methods.FixtureSettings.
func (Method) SettingsFrom(f *methods.Fixture) (config.Section, error) {
	cfg, err := ConfigFromMeta(f.Meta)
	if err != nil {
		return nil, err
	}
	return &Settings{NCtx: cfg.NCtx, ClassSpecific: cfg.ClassSpecific, InitStd: cfg.InitStd, ProxMu: cfg.ProxMu}, nil
}

// Step implements methods.Stepper.
func (Method) Step(ctx context.Context, f *methods.Fixture) (tensor.Named, error) {
	return StepFromFile(f.Model, f.Params, f.FloatBatch(), f.Meta)
}
