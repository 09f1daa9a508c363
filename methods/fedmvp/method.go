package fedmvp

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/prefixcache"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/tokenizer"
)

func init() { methods.Register(Method{}) }

// Shared selects the tensors the server averages: the whole prompt learner
// (the authors' server averages the prompt learner's state dict).
var Shared = federation.Prefix(Prefix)

// StateLoRA names the site's LoRA switch in its saved state and in what it
// keeps for `pfedmma predict` ([1]: 1 after the switch).
const StateLoRA = "fedmvp.lora"

// Settings is the fedmvp config section.
type Settings struct {
	// Alpha is α, the weight of the consistency term (the authors' --alpha 10).
	Alpha float64 `yaml:"alpha"`
	// LoRAThreshold is the loss below which a client switches to LoRA after
	// a round (client.py's early_stop_threshold 0.5; 0: never).
	LoRAThreshold float64 `yaml:"lora_threshold"`
	// LoRARank is r of the LoRA factors (8).
	LoRARank int `yaml:"lora_rank"`
	// Heads of the PromptFormer's cross-attention (4).
	Heads int `yaml:"heads"`
	// Prompts is K, the visual prompts pooled from the patches (4).
	Prompts int `yaml:"prompts"`
	// FlipProb is the probability that a batch's consistency target is
	// zero-shot CLIP on the mirrored images (RandomHorizontalFlip's 0.5).
	FlipProb float64 `yaml:"flip_prob"`
	// LR and LocalEpochs, when set, replace the run's optimizer.lr and
	// federation.local_epochs for this method; 0 keeps the run's.
	LR          float64 `yaml:"lr"`
	LocalEpochs int     `yaml:"local_epochs"`

	// descTokens, when set, are the fixtures' description token rows
	// [N, ctx] of the one label space and descClass their classes.
	descTokens, descClass []int
}

// Check implements config.Section.
func (s *Settings) Check(c *config.Checker) {
	c.NonNegative("alpha", s.Alpha)
	c.NonNegative("lora_threshold", s.LoRAThreshold)
	c.AtLeast("lora_rank", s.LoRARank, 1)
	c.AtMost("lora_rank", s.LoRARank, 1024)
	c.AtLeast("heads", s.Heads, 1)
	c.AtMost("heads", s.Heads, 64)
	c.AtLeast("prompts", s.Prompts, 1)
	c.AtMost("prompts", s.Prompts, 64)
	c.Range("flip_prob", s.FlipProb, 0, 1)
	c.NonNegative("lr", s.LR)
	c.AtLeast("local_epochs", s.LocalEpochs, 0)
	c.AtMost("local_epochs", s.LocalEpochs, config.MaxOwnLocalEpochs)
}

func (s *Settings) config(seed uint64) Config {
	return Config{Alpha: s.Alpha, Heads: s.Heads, Rank: s.LoRARank, Prompts: s.Prompts, Seed: seed}
}

// Method is FedMVP for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "fedmvp",
		Trains: "a PromptFormer (cross-attention of the patch embeddings over class-description features) whose pooled outputs are visual prompts; after the loss falls below lora_threshold, LoRA factors on its inputs instead",
		Shares: "the whole prompt learner (uniform mean, as the authors' server); the LoRA switch stays on the site",
		Loader: methods.TorchLoader, // mainaksingha01/FedMVP: dm_federated.build_data_loader, no drop_last
		Paper:  "Singha et al., FedMVP: Federated Multi-modal Visual Prompt Tuning for Vision-Language Models (ICCV 2025)"}
}

// DefaultConfig implements methods.Method: the authors' settings.
func (Method) DefaultConfig() config.Section {
	c := DefaultConfig()
	return &Settings{Alpha: c.Alpha, LoRAThreshold: 0.5, LoRARank: c.Rank, Heads: c.Heads, Prompts: c.Prompts, FlipProb: 0.5}
}

// Depth implements methods.Method: the records are the patch embeddings
// before ln_pre and the zero-shot features of the image and its mirror
// (methods.Embeddings); the whole image encoder runs every step.
func (Method) Depth(sec config.Section, layers int) (int, error) {
	if _, err := settings(sec); err != nil {
		return 0, err
	}
	return methods.Embeddings, nil
}

func settings(sec config.Section) (*Settings, error) {
	s, err := methods.Section[Settings]("fedmvp", sec)
	if err != nil {
		return nil, err
	}
	if err := s.config(0).Validate(0, 0); err != nil {
		return nil, err
	}
	return s, nil
}

// site is a client's own state: the LoRA switch, the loss of its last
// training batch and, when that loss is below the switch threshold, the
// cross-attention as it was before that batch's step (frozen holds it).
type site struct {
	c      *client.Client
	s      *Settings
	lora   bool
	last   float64
	frozen tensor.Named
}

func siteOf(c *client.Client) *site { return c.Site.(*site) }

// Build implements methods.Method.
func (Method) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	cfg := s.config(env.Seed)
	opts := env.Train.Own("", s.LR, 0, s.LocalEpochs)
	return client.Build(env, &client.Spec{Name: "fedmvp", Input: client.Embeddings, Shared: Shared, Train: &opts,
		NewLearner: func(space int, _ []int) (client.Learner, error) {
			tokens, rows, err := spaceDescriptions(env, s, space)
			if err != nil {
				return nil, err
			}
			C := len(env.Task.Spaces[space].Classes)
			text, err := TextFeatures(env.Model, tokens)
			if err != nil {
				return nil, err
			}
			return New(env.Model, text, rows, C, cfg)
		},
		Strategy: func(init tensor.Named) federation.Strategy {
			shared := tensor.Named{}
			for name, t := range init {
				if Shared(name) {
					shared[name] = t.Clone()
				}
			}
			return strategy.UniformMean(Shared, shared)
		},
		Site: func(c *client.Client) (any, error) { return &site{c: c, s: s}, nil }})
}

// learner is the client's learner of its training space.
func (st *site) learner() (*Learner, error) {
	l, err := st.c.Learner()
	if err != nil {
		return nil, err
	}
	fl, ok := l.(*Learner)
	if !ok {
		return nil, fmt.Errorf("fedmvp: learner %T was not built by fedmvp", l)
	}
	return fl, nil
}

// Trained implements client.Trainer: the cross-attention, or the LoRA
// factors once the site has switched.
func (st *site) Trained(name string) bool { return Trained(name, st.lora) }

// BeforeStep implements client.BeforeStepper: the site's LoRA switch and
// the batch's flip of the consistency view.
func (st *site) BeforeStep(b train.Batch) error {
	fl, err := st.learner()
	if err != nil {
		return err
	}
	fl.LoRA = st.lora
	switch {
	case st.s.FlipProb <= 0:
		fl.Flip = false
	case st.s.FlipProb >= 1:
		fl.Flip = true
	default:
		fl.Flip = b.RNG.Float64() < st.s.FlipProb
	}
	return nil
}

// AfterBackward implements client.AfterBackwarder: it keeps the batch's
// loss and, for a candidate switching batch, the cross-attention from
// before its step (see Upload).
func (st *site) AfterBackward(train.Batch) error {
	fl, err := st.learner()
	if err != nil {
		return err
	}
	st.last, st.frozen = fl.lastLoss, nil
	if !st.lora && st.last < st.s.LoRAThreshold {
		st.frozen = tensor.Named{}
		for name, t := range st.c.P {
			if Trained(name, false) && !Trained(name, true) {
				st.frozen[name] = t.Clone()
			}
		}
	}
	return nil
}

// Upload implements client.Uploader: every parameter, after the switch.
func (st *site) Upload() tensor.Named {
	// client.py: a last-batch loss below the threshold switches the client
	// to LoRA for good, between that batch's forward and its backward: the
	// cross-attention is frozen before the step, which leaves it as it was
	// (the LoRA factors, outside that forward, have no gradient either)
	if !st.lora && st.last < st.s.LoRAThreshold {
		st.lora = true
		for name, t := range st.frozen {
			copy(st.c.P[name].Data, t.Data)
		}
	}
	st.frozen = nil
	up := tensor.Named{}
	for name, t := range st.c.P {
		up[name] = t.Clone()
	}
	return up
}

// Prepare implements client.Preparer: scoring with the site's LoRA switch.
func (st *site) Prepare(l client.Learner) error {
	fl, ok := l.(*Learner)
	if !ok {
		return fmt.Errorf("fedmvp: learner %T was not built by fedmvp", l)
	}
	fl.LoRA = st.lora
	return fl.Prepare()
}

// SaveExtra implements client.ExtraState: the LoRA switch.
func (st *site) SaveExtra() (tensor.Named, error) {
	return tensor.Named{StateLoRA: loraTensor(st.lora)}, nil
}

// LoadExtra implements client.ExtraState.
func (st *site) LoadExtra(saved tensor.Named) error {
	t, ok := saved[StateLoRA]
	if !ok || len(t.Data) != 1 {
		return fmt.Errorf("fedmvp client %d state: no %s", st.c.Task.ID, StateLoRA)
	}
	st.lora = t.Data[0] != 0
	return nil
}

// Kept implements client.Keeper: predict scores with the site's switch.
func (st *site) Kept() (tensor.Named, error) {
	return tensor.Named{StateLoRA: loraTensor(st.lora)}, nil
}

func loraTensor(on bool) *tensor.Tensor {
	t := tensor.New(1)
	if on {
		t.Data[0] = 1
	}
	return t
}

// spaceDescriptions tokenises the description rows of a label space: the
// fixtures' rows when the settings carry them, else the description table
// of the space's class names under the run's template.
func spaceDescriptions(env *methods.Env, s *Settings, space int) ([]int, []int, error) {
	if s.descTokens != nil {
		return s.descTokens, s.descClass, nil
	}
	if env.Tok == nil {
		return nil, nil, fmt.Errorf("fedmvp: no tokenizer to tokenise the class descriptions")
	}
	var names []string
	for _, c := range env.Task.Spaces[space].Classes {
		names = append(names, env.Task.Dataset.Classes[c])
	}
	return descriptionTokens(env.Tok, env.Model.W.Config.Text.ContextLength, names, env.Template)
}

// descriptionTokens tokenises the descriptions of classes under template,
// one row each, and says which class each row describes: training and
// predict build them here alike. The authors cut descriptions to 77
// characters (truncate_text); a shorter context cuts the tokens (EOT kept).
func descriptionTokens(tok *tokenizer.Tokenizer, ctx int, classes []string, template string) (tokens, rows []int, err error) {
	for i, c := range classes {
		for _, d := range Descriptions(c, template) {
			d = Truncate(d)
			ids, err := tok.Tokenize(d, ctx, true)
			if err != nil {
				return nil, nil, fmt.Errorf("fedmvp: description %q: %w", d, err)
			}
			tokens = append(tokens, ids...)
			rows = append(rows, i)
		}
	}
	return tokens, rows, nil
}

// TextFeatures runs the frozen text encoder on description token rows
// [N, ctx] and returns their features [N, E] (unnormalised).
func TextFeatures(m *clip.Model, tokens []int) ([]float32, error) {
	ctx := m.W.Config.Text.ContextLength
	if len(tokens) == 0 || len(tokens)%ctx != 0 {
		return nil, fmt.Errorf("fedmvp: %d description token ids is not a whole number of %d-long rows", len(tokens), ctx)
	}
	N := len(tokens) / ctx
	methods.DetachAll(m)
	t := m.Text
	x0, err := clip.TextPrefix(m, 1, tokens, N)
	if err != nil {
		return nil, fmt.Errorf("fedmvp: %w", err)
	}
	eot := clip.EOTPositions(tokens, N, ctx)
	x, T := clip.TruncatePrefix(x0, eot, N, ctx, t.Cfg.Width)
	pooled := t.Stack.Forward(x, N, T, 0, len(t.Stack.Blocks), eot, false)
	out := make([]float32, N*m.W.Config.EmbedDim)
	t.HeadForward(out, pooled, N)
	return out, nil
}

// Predictor implements methods.Method: the site's prompt learner (and LoRA
// switch) on the frozen model, for any class names.
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	if _, ok := saved[ParamLinW]; !ok {
		return nil, fmt.Errorf("fedmvp: saved site lacks %q", ParamLinW)
	}
	lora := false
	if t, ok := saved[StateLoRA]; ok && len(t.Data) == 1 {
		lora = t.Data[0] != 0
	}
	params := maps.Clone(saved)
	delete(params, StateLoRA)
	return predictor{pe: pe, cfg: s.config(0), params: params, lora: lora}, nil
}

type predictor struct {
	pe     methods.PredictEnv
	cfg    Config
	params tensor.Named
	lora   bool
}

func (p predictor) Logits(pixels []float32, B int, classes []string) ([]float32, error) {
	m := p.pe.Model
	tokens, rows, err := descriptionTokens(p.pe.Tok, m.W.Config.Text.ContextLength, classes, p.pe.Template)
	if err != nil {
		return nil, err
	}
	text, err := TextFeatures(m, tokens)
	if err != nil {
		return nil, err
	}
	l, err := New(m, text, rows, len(classes), p.cfg)
	if err != nil {
		return nil, err
	}
	if err := prompt.Load(l.Params(), p.params); err != nil {
		return nil, fmt.Errorf("fedmvp: saved site: %w", err)
	}
	l.LoRA = p.lora
	if err := l.Prepare(); err != nil {
		return nil, err
	}
	rec := prefixcache.ImageRecords(m, methods.Embeddings, pixels, B, nil)
	return l.Logits(rec, B)
}

// FixtureKeys lists the hyper-parameters FedMVP's `pfedmma step` and
// `round` read (cmd/pfedmma refuses any other --set key).
func (Method) FixtureKeys() []string {
	return []string{"alpha", "batch_size", "flip_prob", "heads", "local_epochs", "logit_scale", "lora", "lora_rank",
		"lora_threshold", "lr", "momentum", "prompts", "weight_decay"}
}

// SettingsFrom implements parity.Settings: alpha, lora_rank, heads,
// prompts and flip_prob from the metadata (defaults where absent) and the
// description rows "desc_tokens" [N, ctx] with their classes "desc_class"
// [N] from the batch file.
func (Method) SettingsFrom(f *parity.Fixture) (config.Section, error) {
	s := Method{}.DefaultConfig().(*Settings)
	var err error
	getF := func(key string, dst *float64) {
		if err == nil {
			*dst, err = f.FloatOr(key, *dst)
		}
	}
	getI := func(key string, dst *int) {
		v := float64(*dst)
		getF(key, &v)
		*dst = int(v)
	}
	getF("alpha", &s.Alpha)
	getF("lora_threshold", &s.LoRAThreshold)
	getF("flip_prob", &s.FlipProb)
	getI("lora_rank", &s.LoRARank)
	getI("heads", &s.Heads)
	getI("prompts", &s.Prompts)
	if err != nil {
		return nil, fmt.Errorf("fedmvp: %w", err)
	}
	if s.descTokens, err = f.IntsOf("desc_tokens"); err != nil {
		return nil, fmt.Errorf("fedmvp: %w", err)
	}
	if s.descClass, err = f.IntsOf("desc_class"); err != nil {
		return nil, fmt.Errorf("fedmvp: %w", err)
	}
	if ctx := f.Model.W.Config.Text.ContextLength; len(s.descTokens) != len(s.descClass)*ctx {
		return nil, fmt.Errorf("fedmvp: desc_tokens holds %d ids for %d rows of %d (desc_class)", len(s.descTokens), len(s.descClass), ctx)
	}
	if err := s.config(0).Validate(0, 0); err != nil {
		return nil, err
	}
	return s, nil
}

// Step implements parity.Stepper: the layout of testdata/fedmvp/step*.
// The flip of the consistency target comes from flip_prob (0 or 1 in the
// fixtures) and the mode from "lora" (1: after the switch) in the
// metadata. Besides the production client's outputs it writes the
// method's intermediates: "text_features" [N, E] (normalised),
// "textfeat_ctx" [N, Dv], "vis_ctx" [B, K, Dv], "image_features" [B, E]
// (normalised), "zs_features" [B, E] (normalised), "ce" and "vis_score".
func (m Method) Step(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	sec, err := m.SettingsFrom(f)
	if err != nil {
		return nil, err
	}
	s := sec.(*Settings)
	lora, err := f.FloatOr("lora", 0)
	if err != nil {
		return nil, err
	}
	labels, err := f.IntsOf("labels")
	if err != nil {
		return nil, err
	}
	images, err := f.Tensor("images")
	if err != nil {
		return nil, err
	}
	B := len(labels)
	if S := f.Model.W.Config.Vision.ImageSize; len(images.Data) != B*3*S*S {
		return nil, fmt.Errorf("fedmvp: tensor \"images\" holds %d values, want %d labels × 3 × %d × %d", len(images.Data), B, S, S)
	}
	tokens, err := f.IntsOf("tokens")
	if err != nil {
		return nil, err
	}
	C := len(tokens) / f.Model.W.Config.Text.ContextLength
	text, err := TextFeatures(f.Model, s.descTokens)
	if err != nil {
		return nil, err
	}
	logitScale, err := f.FloatOr("logit_scale", float64(f.Model.W.LogitScale))
	if err != nil {
		return nil, err
	}
	l, err := New(f.Model, text, s.descClass, C, s.config(0))
	if err != nil {
		return nil, err
	}
	l.LogitScale = float32(logitScale)
	if err := prompt.Load(l.Params(), f.Params); err != nil {
		return nil, fmt.Errorf("fedmvp: %w", err)
	}
	l.LoRA, l.Flip = lora != 0, s.FlipProb >= 1
	rec := prefixcache.ImageRecords(f.Model, methods.Embeddings, images.Data, B, nil)
	opts, err := f.TrainOptions()
	if err != nil {
		return nil, err
	}
	loss, terms, logits, err := l.Step(rec, labels)
	if err != nil {
		return nil, err
	}
	E, Dv := l.E, l.Dv
	out := tensor.Named{
		"loss":           {Shape: []int{1}, Data: []float32{float32(loss)}},
		"ce":             {Shape: []int{1}, Data: []float32{float32(terms["ce"])}},
		"vis_score":      {Shape: []int{1}, Data: []float32{float32(terms["vis_score"])}},
		"logits":         {Shape: []int{B, C}, Data: logits},
		"text_features":  {Shape: []int{l.N, E}, Data: slices.Clone(l.text)},
		"textfeat_ctx":   {Shape: []int{l.N, Dv}, Data: slices.Clone(l.pf.ctx)},
		"vis_ctx":        {Shape: []int{B, l.K, Dv}, Data: slices.Clone(l.pvis)},
		"image_features": {Shape: []int{B, E}, Data: slices.Clone(l.fhat)},
		"zs_features":    {Shape: []int{B, E}, Data: slices.Clone(l.zhat)},
	}
	// one step of a fresh SGD on the tensors the mode trains
	var params []optim.Param
	for _, name := range slices.Sorted(maps.Keys(l.Params())) {
		if !Trained(name, l.LoRA) {
			continue
		}
		p := l.Params()[name]
		out["grad."+name] = &tensor.Tensor{Shape: slices.Clone(p.Shape), Data: slices.Clone(l.Grads()[name].Data)}
		params = append(params, optim.Param{Name: name, Value: p.Data, Grad: l.Grads()[name].Data})
	}
	if err := optim.NewSGD(opts.Momentum, opts.WD, false).Step(opts.LR, params); err != nil {
		return nil, err
	}
	for _, p := range params {
		out["step1."+p.Name] = &tensor.Tensor{Shape: slices.Clone(l.Params()[p.Name].Shape), Data: slices.Clone(p.Value)}
	}
	return out, nil
}
