package pfedmma

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/tensor"
)

func init() { methods.Register(Method{}) }

// Settings is the pfedmma config section (pfedmma.md §1).
//
// Block numbers are 1-based (1 … L for an L-block encoder); block 0 is the
// embeddings. Start ℓ and End pick the adapted blocks ℓ … End of both the
// image and the text encoder:
//
//	start: 10, end: 0    blocks 10–12 of ViT-B (the paper, CLIP datasets)
//	start: 5,  end: 0    blocks 5–12 (the paper for CIFAR/DomainNet; the reference code's config)
//	start: 0,  end: 0    the embeddings and every block
//	start: -3, end: 0    the last 3 blocks of whatever model is loaded
type Settings struct {
	// Start is ℓ, the first adapted block. 1 … L is a block number; 0 also
	// adapts the embeddings (then every block up to End); a negative value
	// −k means the last k blocks (ℓ = L − k + 1), so presets work with any
	// model depth.
	Start int `yaml:"start"`
	// End (≥ 0) is the last adapted block; 0 means the last block L.
	End int `yaml:"end"`
	// Dim is the adapter bottleneck r (≥ 1); the paper uses 32.
	Dim int `yaml:"dim"`
	// Scale is α > 0, the factor on the adapter branch; the paper's best HM
	// is at 0.005, the reference code's config uses 0.001.
	Scale float64 `yaml:"scale"`
	// Activation is δ between the projections: relu (what the reference
	// code runs; the only one implemented) or gelu (the paper's "e.g.
	// GELU"), refused when the run starts.
	Activation string `yaml:"activation"`
	// CacheBlockOutput keeps block ℓ's frozen output and its adapter input
	// ln_1(x) in the prefix cache instead of the prefix x (split records,
	// twice the cache): the adapter is a branch parallel to the whole
	// frozen block, so block ℓ then runs once per image instead of at every
	// step. Applies when 1 ≤ ℓ < L (the last block is pruned to the pooled
	// token, and ℓ = 0 adapts the embeddings).
	CacheBlockOutput bool `yaml:"cache_block_output"`
}

// Check implements config.Section.
func (s *Settings) Check(c *config.Checker) {
	c.AtLeast("end", s.End, 0)
	if s.Start > 0 && s.End > 0 && s.Start > s.End {
		c.Fail("start", "block %d is after end block %d", s.Start, s.End)
	}
	c.AtLeast("dim", s.Dim, 1)
	c.AtMost("dim", s.Dim, 4096)
	c.Positive("scale", s.Scale)
	c.OneOf("activation", s.Activation, "relu", "gelu")
}

// Blocks resolves Start and End against a model with layers blocks: the
// first and last adapted block, 1-based, first 0 meaning the embeddings are
// adapted too. It fails when the range does not fit the model.
func (s Settings) Blocks(layers int) (first, last int, err error) {
	if layers < 1 {
		return 0, 0, fmt.Errorf("pfedmma: model has %d blocks", layers)
	}
	first, last = s.Start, s.End
	if first < 0 {
		first = layers + first + 1
		if first < 1 {
			return 0, 0, fmt.Errorf("pfedmma.start %d: the model has only %d blocks", s.Start, layers)
		}
	}
	if last == 0 {
		last = layers
	}
	if last > layers {
		return 0, 0, fmt.Errorf("pfedmma.end %d: the model has blocks 1..%d", s.End, layers)
	}
	if first > last {
		return 0, 0, fmt.Errorf("pfedmma.start %d: first block %d is after last block %d (model has %d blocks)", s.Start, first, last, layers)
	}
	return first, last, nil
}

// Adapters resolves the settings into an adapter configuration for a model
// with layers blocks.
func (s Settings) Adapters(layers int) (Config, error) {
	if s.Activation != "" && s.Activation != "relu" {
		return Config{}, fmt.Errorf("pfedmma.activation %q: only relu (the reference code's) is implemented", s.Activation)
	}
	first, last, err := s.Blocks(layers)
	if err != nil {
		return Config{}, err
	}
	cfg := Config{Start: first, End: last, Dim: s.Dim, Scale: float32(s.Scale)}
	return cfg, cfg.Validate(layers)
}

// Method is pFedMMA for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "pfedmma",
		Trains: "image and text adapters (down, shared r×r, up) in blocks ℓ..L",
		Shares: "the shared r×r projections (FedAvg, weights n_i)",
		Loader: methods.DasslLoader, // sajjad-ucsb/pFedMMA: Dassl's fed_train_loader_x
		Paper:  "Ghiasvand et al., pFedMMA: Personalized Federated Fine-Tuning with Multi-Modal Adapter for Vision-Language Models (2025)"}
}

// DefaultConfig implements methods.Method: the paper's settings.
func (Method) DefaultConfig() config.Section {
	return &Settings{Start: 10, End: 0, Dim: 32, Scale: 0.005, Activation: "relu", CacheBlockOutput: true}
}

func settings(sec config.Section) (*Settings, error) {
	return methods.Section[Settings]("pfedmma", sec)
}

// Depth implements methods.Method: the first adapted block.
func (Method) Depth(sec config.Section, layers int) (int, error) {
	s, err := settings(sec)
	if err != nil {
		return 0, err
	}
	cfg, err := s.Adapters(layers)
	return cfg.Start, err
}

// SplitRecords implements methods.Splitter: block ℓ's adapter is a branch
// parallel to the whole frozen block, so with cache_block_output the cache
// keeps block ℓ's frozen output (1 ≤ ℓ < L).
func (Method) SplitRecords(sec config.Section, layers int) (bool, error) {
	s, err := settings(sec)
	if err != nil {
		return false, err
	}
	cfg, err := s.Adapters(layers)
	if err != nil {
		return false, err
	}
	return s.CacheBlockOutput && CanSplit(cfg.Start, layers), nil
}

// Build implements methods.Method: every client starts from the same
// seeded adapters; the server averages the shared projections.
func (m Method) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	c := env.Model.W.Config
	cfg, err := s.Adapters(min(c.Vision.Layers, c.Text.Layers))
	if err != nil {
		return nil, err
	}
	if cfg.Start != env.Start {
		return nil, fmt.Errorf("pfedmma: adapters start at block %d, the cached prefixes at %d", cfg.Start, env.Start)
	}
	if env.Split() && !CanSplit(cfg.Start, min(c.Vision.Layers, c.Text.Layers)) {
		return nil, fmt.Errorf("pfedmma: the cache holds block %d's output (split records), which needs 1 ≤ start < %d", cfg.Start, min(c.Vision.Layers, c.Text.Layers))
	}
	init := New(cfg, c.Vision.Width, c.Text.Width, rand.New(rand.NewPCG(env.Seed, 0x6d6d61)))
	if env.Init != nil {
		if err := init.Load(env.Init); err != nil {
			return nil, fmt.Errorf("pfedmma initial adapters: %w", err)
		}
	}
	ws := env.Shared("pfedmma.workspace", func() any { return NewWorkspace() }).(*Workspace)
	var group *evalGroup
	if cfg.Start >= 1 {
		group = &evalGroup{env: env, start: cfg.Start}
	}
	return client.Build(env, &client.Spec{Name: "pfedmma", Input: client.Block, Shared: federation.Filter(IsShared), StatePrefix: "adapter/",
		Init: func() (tensor.Named, error) { return init.Params, nil },
		Site: func(c *client.Client) (any, error) { return newSite(c, env, init, ws, group) }})
}

// Predictor implements methods.Method: a site's adapters on the full model.
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	model := pe.Model
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	c := model.W.Config
	cfg, err := s.Adapters(min(c.Vision.Layers, c.Text.Layers))
	if err != nil {
		return nil, err
	}
	a := New(cfg, c.Vision.Width, c.Text.Width, nil)
	if err := a.Load(saved); err != nil {
		return nil, err
	}
	l, err := NewLearner(model, a, nil)
	if err != nil {
		return nil, err
	}
	// the run's records: split when it cached block ℓ's output
	l.Split = s.CacheBlockOutput && CanSplit(cfg.Start, min(c.Vision.Layers, c.Text.Layers))
	return predictor{l, pe}, nil
}

type predictor struct {
	l  *Learner
	pe methods.PredictEnv
}

func (p predictor) Logits(pixels []float32, B int, classes []string) ([]float32, error) {
	tokens, err := p.pe.Tokens(classes)
	if err != nil {
		return nil, err
	}
	C := len(classes)
	p.l.Attach()
	if err := p.l.SetClasses(tokens, C); err != nil {
		return nil, err
	}
	txt := append([]float32(nil), p.l.TextFeatures(false)...)
	var rec []float32
	if p.l.Split {
		rec = clip.ImageSplitRecords(p.l.Model, p.l.Adapters.Cfg.Start, pixels, B, nil)
	} else {
		rec = clip.ImagePrefix(p.l.Model, p.l.Adapters.Cfg.Start, pixels, B, nil)
	}
	return p.l.Logits(rec, B, txt), nil
}

// FitModel implements config.ModelFitter: a start block the model does not
// have becomes the same share of the model's last blocks (the paper's
// blocks 10–12 of 12 are the last quarter: on a 4-block model, block 4).
func (s *Settings) FitModel(layers int) []string {
	var out []string
	if s.Start > layers {
		old := s.Start
		share := max(1, int(math.Round(float64(12-old+1)/12*float64(layers))))
		s.Start = -share
		out = append(out, fmt.Sprintf("start %d → %d (the last %d of the model's %d blocks)", old, s.Start, share, layers))
	}
	if s.End > layers {
		out = append(out, fmt.Sprintf("end %d → 0 (the last block)", s.End))
		s.End = 0
	}
	return out
}

// SmallSettings implements methods.SmallRun: the conformance suite's tiny
// world runs adapters on the last two blocks, so that block ℓ is a full
// block and the run caches split records (cache_block_output), the path
// of the paper's settings (blocks 10–12); the world presets adapt only the
// last block, which is never split.
func (Method) SmallSettings(int) map[string]string { return map[string]string{"start": "-2"} }
