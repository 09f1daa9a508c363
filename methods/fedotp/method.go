package fedotp

import (
	"fmt"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/ot"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

func init() { methods.Register(Method{}) }

// Settings is the fedotp config section (defaults: the authors' few-shot
// scripts; see the package doc).
type Settings struct {
	NCtx       int     `yaml:"n_ctx"`       // context tokens per prompt (16)
	NumPrompt  int     `yaml:"num_prompt"`  // prompts per client (2: global + local)
	AvgPrompt  int     `yaml:"avg_prompt"`  // leading prompts the server averages (1)
	OT         string  `yaml:"ot"`          // COT (unbalanced, default) or Sinkhorn
	Eps        float64 `yaml:"eps"`         // entropic regularisation ε > 0 (0.01)
	Thresh     float64 `yaml:"thresh"`      // stopping threshold (1e-3)
	MaxIter    int     `yaml:"max_iter"`    // OT iterations at most (100)
	TopPercent float64 `yaml:"top_percent"` // COT's transported mass (0.8)
	InitStd    float64 `yaml:"init_std"`    // σ of the contexts' N(0, σ²) init (0.02)
	// ClassTokenPosition is CoOp's class_token_position of every prompt:
	// end (default), middle or front.
	ClassTokenPosition string `yaml:"class_token_position"`
	// LR and LocalEpochs, when set, replace the run's optimizer.lr and
	// federation.local_epochs for this method; 0 keeps the run's.
	LR          float64 `yaml:"lr"`
	LocalEpochs int     `yaml:"local_epochs"`
}

// Check implements config.Section.
func (s *Settings) Check(c *config.Checker) {
	c.AtLeast("n_ctx", s.NCtx, 1)
	c.AtMost("n_ctx", s.NCtx, 64)
	c.AtLeast("num_prompt", s.NumPrompt, 1)
	c.AtMost("num_prompt", s.NumPrompt, 16)
	c.AtLeast("avg_prompt", s.AvgPrompt, 0)
	if s.AvgPrompt > s.NumPrompt {
		c.Fail("avg_prompt", "%d is more than num_prompt %d", s.AvgPrompt, s.NumPrompt)
	}
	c.OneOf("ot", s.OT, ot.COT, ot.Sinkhorn)
	c.Positive("eps", s.Eps)
	c.Positive("thresh", s.Thresh)
	c.AtLeast("max_iter", s.MaxIter, 1)
	c.AtMost("max_iter", s.MaxIter, 100000)
	c.Positive("top_percent", s.TopPercent) // COT transports a positive mass
	c.Range("top_percent", s.TopPercent, 0, 1)
	c.NonNegative("init_std", s.InitStd)
	if s.ClassTokenPosition != "" {
		c.OneOf("class_token_position", s.ClassTokenPosition, prompt.PositionEnd, prompt.PositionMiddle, prompt.PositionFront)
	}
	c.NonNegative("lr", s.LR)
	c.AtLeast("local_epochs", s.LocalEpochs, 0)
	c.AtMost("local_epochs", s.LocalEpochs, config.MaxOwnLocalEpochs)
}

func (s *Settings) config(seed uint64) Config {
	return Config{NCtx: s.NCtx, NumPrompt: s.NumPrompt, AvgPrompt: s.AvgPrompt, InitStd: s.InitStd, Seed: seed, Position: s.ClassTokenPosition,
		OT: ot.Config{Method: s.OT, Eps: s.Eps, Thresh: s.Thresh, MaxIter: s.MaxIter, TopPercent: s.TopPercent}}
}

func fromConfig(c Config) *Settings {
	return &Settings{NCtx: c.NCtx, NumPrompt: c.NumPrompt, AvgPrompt: c.AvgPrompt, OT: c.OT.Method, Eps: c.OT.Eps,
		Thresh: c.OT.Thresh, MaxIter: c.OT.MaxIter, TopPercent: c.OT.TopPercent, InitStd: c.InitStd,
		ClassTokenPosition: c.Position}
}

// Method is FedOTP for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "fedotp", Trains: "a global and a local CoOp prompt matched to image patches by optimal transport",
		Shares: "the global prompt only (FedAvg, weights n_i)",
		Loader: methods.DasslLoader, // HongxiaLee/FedOTP: Dassl's fed_train_loader_x
		Paper:  "Li et al., Global and Local Prompts Cooperation via Optimal Transport for Federated Learning (CVPR 2024)"}
}

// DefaultConfig implements methods.Method.
func (Method) DefaultConfig() config.Section { return fromConfig(DefaultConfig()) }

// Depth implements methods.Method: every token's features are cached.
func (Method) Depth(config.Section, int) (int, error) { return methods.TokenFeatures, nil }

func settings(sec config.Section) (*Settings, error) {
	s, err := methods.Section[Settings]("fedotp", sec)
	if err != nil {
		return nil, err
	}
	return s, s.config(0).Validate()
}

// Build implements methods.Method: clients upload the first avg_prompt
// prompts, the server averages them, and clients continue from [global;
// their own local prompts].
func (Method) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	cfg := s.config(env.Seed)
	opts := env.Train.Own("", s.LR, 0, s.LocalEpochs)
	return client.Build(env, &client.Spec{Name: "fedotp", Placeholder: cfg.NCtx, Shared: federation.Names(ParamCtx), Train: &opts,
		NewLearner: func(_ int, tokens []int) (client.Learner, error) {
			l, err := New(env.Model, tokens, cfg)
			if err != nil {
				return nil, err
			}
			return clientLearner{l}, nil
		},
		Strategy: func(init tensor.Named) federation.Strategy {
			g, _ := GlobalPart(init, cfg.AvgPrompt) // shapes checked by New
			// every client, selected or not, evaluates [new global; its
			// own local prompts] (baselines.md §4)
			return &strategy.FedAvg{Shared: federation.Names(ParamCtx), Initial: g, EvaluateGlobal: true}
		},
		Site: func(c *client.Client) (any, error) { return &site{c: c, avg: cfg.AvgPrompt}, nil }})
}

// site uploads the first avg prompts of the client's context and installs
// the server's average over them, keeping its own local prompts.
type site struct {
	c   *client.Client
	avg int
}

// Upload implements client.Uploader.
func (s *site) Upload() tensor.Named {
	g, _ := GlobalPart(s.c.P, s.avg)
	return g
}

// Receive implements client.Receiver.
func (s *site) Receive(in tensor.Named) error {
	c := s.c
	for name := range in {
		if name != ParamCtx {
			return fmt.Errorf("fedotp client %d: received unexpected tensor %q", c.Task.ID, name)
		}
	}
	if len(in) == 0 {
		return nil
	}
	next, err := WithGlobal(c.P, in)
	if err != nil {
		return fmt.Errorf("fedotp client %d: %w", c.Task.ID, err)
	}
	copy(c.P[ParamCtx].Data, next[ParamCtx].Data)
	return nil
}

// clientLearner is the learner as a client.Learner: Step adds the terms
// (none), Prepare computes the text features once per evaluation, Logits
// reuses them. (Learner.Step keeps its (loss, logits) form, which the
// reference replay calls.)
type clientLearner struct{ *Learner }

func (s clientLearner) Step(img []float32, labels []int) (float64, map[string]float64, []float32, error) {
	loss, logits, err := s.Learner.Step(img, labels)
	return loss, nil, logits, err
}

func (s clientLearner) Prepare() error {
	txt, err := s.enc.Forward(s.ctx.Data, s.Cfg.NumPrompt, false)
	if err != nil {
		return fmt.Errorf("fedotp: %w", err)
	}
	s.txt = append(s.txt[:0:0], txt...)
	return nil
}

func (s clientLearner) Logits(img []float32, B int) ([]float32, error) {
	return s.forwardHead(img, B)
}

// Predictor implements methods.Method: the site's prompts and the OT head
// on the image's token features.
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	cfg := s.config(0)
	return TokenPredictor[*Learner]{PE: pe, NCtx: cfg.NCtx, Saved: saved,
		New: func(tokens []int) (*Learner, error) { return New(pe.Model, tokens, cfg) }}, nil
}

// TokenPredictor is a methods.Predictor for learners that score an image's
// every-token features (FedOTP's, PLOT's): per call it builds the learner
// for the asked classes with New (NCtx context placeholders), loads the
// site's saved prompts into it and scores the images' token features.
type TokenPredictor[L interface {
	Params() tensor.Named
	Logits(imgTok []float32, B int) ([]float32, error)
}] struct {
	PE    methods.PredictEnv
	NCtx  int
	Saved tensor.Named
	New   func(tokens []int) (L, error)
}

// Logits implements methods.Predictor.
func (p TokenPredictor[L]) Logits(pixels []float32, B int, classes []string) ([]float32, error) {
	l, err := client.PredictLearner(p.PE, p.NCtx, classes, p.Saved, p.New)
	if err != nil {
		return nil, err
	}
	return l.Logits(append([]float32(nil), p.PE.Model.EncodeImageTokens(pixels, B)...), B)
}

// SmallSettings implements methods.SmallRun: 8 context tokens leave room
// for the class names in a small CLIP's 24-token prompts.
func (Method) SmallSettings(int) map[string]string { return map[string]string{"n_ctx": "8"} }
