package pfedmoap

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

func init() { methods.Register(Method{}) }

// Settings is the pfedmoap config section (defaults: the authors' code; see
// the package doc). The prompt trains with the run's optimizer settings
// (the paper: SGD lr 0.002, cosine), the gate with its own SGD.
type Settings struct {
	NCtx       int     `yaml:"n_ctx"`       // context tokens (16)
	GateWidth  int     `yaml:"gate_width"`  // d_g: the gate's width (128; must divide the feature dim)
	GateHeads  int     `yaml:"gate_heads"`  // attention heads (8)
	Scaling    float64 `yaml:"scaling"`     // fixed attention-score scale (10, as the authors' code)
	Lambda     float64 `yaml:"lambda"`      // λ, weight of the local prompt's logits (0.5)
	NumExperts int     `yaml:"num_experts"` // prompts the gate mixes, the local one included (10)
	// Selection of the downloaded experts: nearest (the paper: K nearest
	// by L2 on the pool as it stood at the round's start) or random (what
	// the authors' code runs).
	Selection       string  `yaml:"selection"`
	GateLR          float64 `yaml:"gate_lr"`           // 0.01, constant
	GateMomentum    float64 `yaml:"gate_momentum"`     // 0.9
	GateWeightDecay float64 `yaml:"gate_weight_decay"` // 5e-4
	InitStd         float64 `yaml:"init_std"`          // σ of the prompt's N(0, σ²) init (0.02)
	// ClassTokenPosition is CoOp's class_token_position of the local and
	// the expert prompts: end (default), middle or front.
	ClassTokenPosition string `yaml:"class_token_position"`
}

// Check implements config.Section.
func (s *Settings) Check(c *config.Checker) {
	c.AtLeast("n_ctx", s.NCtx, 1)
	c.AtMost("n_ctx", s.NCtx, 64)
	c.AtLeast("gate_width", s.GateWidth, 1)
	c.AtMost("gate_width", s.GateWidth, 4096)
	c.AtLeast("gate_heads", s.GateHeads, 1)
	if s.GateHeads > 0 && s.GateWidth%s.GateHeads != 0 {
		c.Fail("gate_heads", "%d does not divide gate_width %d", s.GateHeads, s.GateWidth)
	}
	c.Positive("scaling", s.Scaling)
	c.NonNegative("lambda", s.Lambda)
	c.AtLeast("num_experts", s.NumExperts, 1)
	c.AtMost("num_experts", s.NumExperts, 1000)
	c.OneOf("selection", s.Selection, "nearest", "random")
	c.Positive("gate_lr", s.GateLR)
	c.Range("gate_momentum", s.GateMomentum, 0, 0.999)
	c.NonNegative("gate_weight_decay", s.GateWeightDecay)
	c.NonNegative("init_std", s.InitStd)
	if s.ClassTokenPosition != "" {
		c.OneOf("class_token_position", s.ClassTokenPosition, prompt.PositionEnd, prompt.PositionMiddle, prompt.PositionFront)
	}
}

func (s *Settings) config(seed uint64) Config {
	c := DefaultConfig()
	c.NCtx, c.GateWidth, c.GateHeads, c.Scaling, c.Lambda, c.NumExperts = s.NCtx, s.GateWidth, s.GateHeads, s.Scaling, s.Lambda, s.NumExperts
	c.GateLR, c.GateMomentum, c.GateWeightDecay, c.InitStd, c.Seed = s.GateLR, s.GateMomentum, s.GateWeightDecay, s.InitStd, seed
	c.Position = s.ClassTokenPosition
	return c
}

func fromConfig(c Config) *Settings {
	return &Settings{NCtx: c.NCtx, GateWidth: c.GateWidth, GateHeads: c.GateHeads, Scaling: c.Scaling, Lambda: c.Lambda,
		NumExperts: c.NumExperts, Selection: "nearest", GateLR: c.GateLR, GateMomentum: c.GateMomentum,
		GateWeightDecay: c.GateWeightDecay, InitStd: c.InitStd, ClassTokenPosition: c.Position}
}

// Method is pFedMoAP for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "pfedmoap", Trains: "a CoOp prompt and a local attention gate over downloaded expert prompts",
		Shares: "the prompt (FedAvg, weights n_i; a pool of every client's prompt serves the K nearest as experts); the gate stays on the site",
		Loader: methods.DasslLoader, // ljaiverson/pFedMoAP: Dassl's fed_train_loader_x
		Paper:  "Luo et al., Mixture of Experts Made Personalized: Federated Prompt Learning for Vision-Language Models (ICLR 2025)"}
}

// DefaultConfig implements methods.Method.
func (Method) DefaultConfig() config.Section { return fromConfig(DefaultConfig()) }

// BenchSettings implements methods.Benchmarked: two experts, so that the
// benchmark's client 1 is client 0's expert.
func (Method) BenchSettings(sec config.Section) {
	if s, ok := sec.(*Settings); ok {
		s.NumExperts = 2
	}
}

// Depth implements methods.Method: the image encoder is frozen whole.
func (Method) Depth(config.Section, int) (int, error) { return methods.Features, nil }

func settings(sec config.Section) (*Settings, error) {
	s, err := methods.Section[Settings]("pfedmoap", sec)
	if err != nil {
		return nil, err
	}
	return s, s.config(0).Validate()
}

// MinClients is the smallest federation these settings run in: the
// num_experts prompts the gate mixes come from that many clients
// (`bench experiment --preset` measures at least that many).
func (s *Settings) MinClients() int { return s.NumExperts }

// CheckTask implements methods.TaskChecker: the experts come from the other
// clients, so num_experts cannot exceed the number of clients.
func (Method) CheckTask(sec config.Section, clients int) error {
	s, err := settings(sec)
	if err != nil {
		return err
	}
	if s.NumExperts > clients {
		return fmt.Errorf("pfedmoap.num_experts %d: larger than the %d clients (the pool); set pfedmoap.num_experts ≤ %d", s.NumExperts, clients, clients)
	}
	return nil
}

// siteState is what a pFedMoAP client keeps beyond its parameters: the
// experts it downloaded last and its gate's optimizer.
type siteState struct {
	c       *client.Client
	cfg     Config
	env     *methods.Env
	experts [][]float32
	opt     *optim.SGD
	round   int
}

func (c Config) newGateOpt() *optim.SGD {
	return optim.NewSGD(c.GateMomentum, c.GateWeightDecay, false)
}

// Build implements methods.Method.
func (Method) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	cfg := s.config(env.Seed)
	if err := (Method{}).CheckTask(sec, len(env.Task.Clients)); err != nil {
		return nil, err
	}
	return client.Build(env, &client.Spec{Name: "pfedmoap", Placeholder: cfg.NCtx, Shared: federation.Names(ParamCtx),
		NewLearner: func(_ int, tokens []int) (client.Learner, error) {
			l, err := New(env.Model, tokens, cfg)
			if err != nil {
				return nil, err
			}
			return &clientLearner{Learner: l}, nil
		},
		Strategy: func(init tensor.Named) federation.Strategy {
			return &strategy.KNNPool{Shared: federation.Names(ParamCtx), K: cfg.NumExperts - 1,
				Initial: tensor.Named{ParamCtx: init[ParamCtx].Clone()}, Random: s.Selection == "random", Seed: env.Seed}
		},
		Site: func(c *client.Client) (any, error) {
			return &siteState{c: c, cfg: cfg, env: env, opt: cfg.newGateOpt(), round: -1}, nil
		}})
}

// Receive implements client.Receiver: the global prompt, then the experts
// the server picked for the site.
func (st *siteState) Receive(in tensor.Named) error {
	c := st.c
	global, experts, err := strategy.SplitExperts(in)
	if err != nil {
		return err
	}
	if err := c.ReceiveShared(global); err != nil {
		return err
	}
	st.experts = st.experts[:0]
	for _, e := range experts {
		t, ok := e[ParamCtx]
		if !ok {
			return fmt.Errorf("pfedmoap client %d: an expert lacks %q", c.Task.ID, ParamCtx)
		}
		st.experts = append(st.experts, append([]float32(nil), t.Data...))
	}
	l, err := c.Learner()
	if err != nil {
		return err
	}
	return l.(*clientLearner).SetExperts(st.experts)
}

// Prepare implements client.Preparer: the site's experts, then the text
// features.
func (st *siteState) Prepare(l client.Learner) error {
	if err := l.(*clientLearner).SetExperts(st.experts); err != nil {
		return err
	}
	return l.Prepare()
}

// Trained implements client.Trainer: the loop's optimizer trains the
// prompt, AfterBackward the gate.
func (st *siteState) Trained(name string) bool { return !IsGate(name) }

// AfterBackward implements client.AfterBackwarder: the gate's own SGD step.
func (st *siteState) AfterBackward(b train.Batch) error {
	c := st.c
	if len(st.experts) == 0 {
		return nil // the gate takes no part without experts
	}
	if b.Round != st.round && st.env.Train.ResetOptimizer {
		st.opt = st.cfg.newGateOpt()
	}
	st.round = b.Round
	l, err := c.Learner()
	if err != nil {
		return err
	}
	g := l.Grads()
	var ps []optim.Param
	for _, name := range gateNames {
		ps = append(ps, optim.Param{Name: name, Value: c.P[name].Data, Grad: g[name].Data})
	}
	return st.opt.Step(st.cfg.GateLR, ps)
}

// Kept implements client.Keeper: the experts of the last download, which
// the site's evaluation mixes in: predict mixes them in too.
func (st *siteState) Kept() (tensor.Named, error) {
	out := tensor.Named{}
	for i, e := range st.experts {
		out[strategy.ExpertName(i, ParamCtx)] = &tensor.Tensor{Shape: st.c.P[ParamCtx].Shape, Data: append([]float32(nil), e...)}
	}
	return out, nil
}

// SaveExtra implements client.ExtraState: the round, the gate's optimizer
// and the experts.
func (st *siteState) SaveExtra() (tensor.Named, error) {
	out := tensor.Named{"moap/round": {Shape: []int{1}, Data: []float32{float32(st.round)}}}
	for name, t := range st.opt.State() {
		out["moap/gateopt/"+name] = t
	}
	for i, e := range st.experts {
		out["moap/expert/"+strconv.Itoa(i)] = &tensor.Tensor{Shape: []int{len(e)}, Data: append([]float32(nil), e...)}
	}
	return out, nil
}

// LoadExtra implements client.ExtraState.
func (st *siteState) LoadExtra(saved tensor.Named) error {
	c := st.c
	opt := tensor.Named{}
	var experts [][]float32
	for name, t := range saved {
		switch {
		case strings.HasPrefix(name, "moap/gateopt/"):
			opt[strings.TrimPrefix(name, "moap/gateopt/")] = t
		case strings.HasPrefix(name, "moap/expert/"):
			i, err := strconv.Atoi(strings.TrimPrefix(name, "moap/expert/"))
			if err != nil || i < 0 || i > 1000 {
				return fmt.Errorf("pfedmoap client %d state: entry %q", c.Task.ID, name)
			}
			for len(experts) <= i {
				experts = append(experts, nil)
			}
			experts[i] = append([]float32(nil), t.Data...)
		}
	}
	st.opt = st.cfg.newGateOpt()
	if err := st.opt.LoadState(opt); err != nil {
		return fmt.Errorf("pfedmoap client %d gate optimizer: %w", c.Task.ID, err)
	}
	st.experts = experts
	if r, ok := saved["moap/round"]; ok && len(r.Data) == 1 {
		st.round = int(r.Data[0])
	}
	return nil
}

// clientLearner is the learner as a client.Learner: Step adds the terms
// (none), Prepare computes the local text features once per evaluation.
// (Learner.Step keeps its (loss, logits) form, which the reference replay
// calls.)
type clientLearner struct{ *Learner }

func (s *clientLearner) Step(img []float32, labels []int) (float64, map[string]float64, []float32, error) {
	loss, logits, err := s.Learner.Step(img, labels)
	return loss, nil, logits, err
}

// Prepare computes the local text features once per evaluation.
func (s *clientLearner) Prepare() error {
	txt, err := s.enc.Forward(s.ctx.Data, 1, false)
	if err != nil {
		return fmt.Errorf("pfedmoap: %w", err)
	}
	s.txt = append(s.txt[:0:0], txt...)
	return nil
}

func (s *clientLearner) Logits(img []float32, B int) ([]float32, error) {
	return s.head.Forward(img, s.txt, B, s.C, s.E, s.experts, s.LogitScale)
}

// Predictor implements methods.Method: the site's prompt, its gate and the
// experts it downloaded last ("expert/<rank>/prompt_learner.ctx", which
// Plan.Site keeps), mixed as the site's evaluation mixes them.
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	own, experts, err := strategy.SplitExperts(saved)
	if err != nil {
		return nil, fmt.Errorf("pfedmoap: saved site: %w", err)
	}
	var ctxs [][]float32
	for i, e := range experts {
		t, ok := e[ParamCtx]
		if !ok || len(e) != 1 {
			return nil, fmt.Errorf("pfedmoap: saved site: expert %d holds %d tensors, want %q alone", i, len(e), ParamCtx)
		}
		ctxs = append(ctxs, t.Data)
	}
	return predictor{pe: pe, cfg: s.config(0), saved: own, experts: ctxs}, nil
}

type predictor struct {
	pe      methods.PredictEnv
	cfg     Config
	saved   tensor.Named
	experts [][]float32
}

func (p predictor) Logits(pixels []float32, B int, classes []string) ([]float32, error) {
	m := p.pe.Model
	l, err := client.PredictLearner(p.pe, p.cfg.NCtx, classes, p.saved, func(tokens []int) (*Learner, error) {
		return New(m, tokens, p.cfg)
	})
	if err != nil {
		return nil, err
	}
	if err := l.SetExperts(p.experts); err != nil {
		return nil, err
	}
	return l.Logits(append([]float32(nil), m.EncodeImage(pixels, B)...), B)
}

// SmallSettings implements methods.SmallRun: 8 context tokens (a small
// CLIP's prompts are 24 tokens long) and at most as many experts as there
// are clients.
func (Method) SmallSettings(clients int) map[string]string {
	return map[string]string{"n_ctx": "8", "num_experts": strconv.Itoa(min(DefaultConfig().NumExperts, clients))}
}
