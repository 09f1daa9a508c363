// Package fedtpg is FedTPG (Qiu et al., "Federated Text-driven Prompt
// Generation for Vision-Language Models", ICLR 2024): instead of a prompt,
// the clients learn and the server averages a prompt *generator* — learnable
// queries that cross-attend to the CLIP text features of the class names,
// then a GEGLU feed-forward (and optional self-attention layers). A client's
// prompt is generated from the names of its own classes, and the cross
// entropy is over those classes only; at test time the prompt of any class
// list, unseen classes included, is generated from their names. Its point is
// base-to-novel generalisation.
//
// What is computed follows the authors' code (boschresearch/FedTPG:
// model/FedTPG.py, model/prompt_net.py, federated/{client,server}.py; spec
// fedtpg.md), reproduced exactly by the fixtures in testdata/fedtpg:
//   - The generator's input is the L2-normalised CLIP text features of the
//     bare class names ("{name}", underscores as spaces; no template, no
//     period), without gradient. No residual around the cross-attention;
//     the feed-forward and each self-attention have one. GEGLU's value half
//     is the first half of the 8E outputs, the gate (exact erf GELU) the
//     second.
//   - The n_ctx generated vectors replace the "X" placeholders of every
//     class's prompt "X X … X {name}." at the embedding (one shared prompt).
//   - Each client trains over the classes of its own images (own_classes,
//     the code's per-client available_cls): its generator is conditioned on
//     their names and its cross entropy is over them, whatever label space
//     the protocol gives it (in base-to-novel here every client's space is
//     all base classes). Scoring (local, base, novel) generates the prompt
//     of the scored space's classes.
//   - The whole generator is shared and averaged; nothing is private. The
//     server's mean is uniform over the round's clients, as the code does
//     (weighted_mean: true weights by n_i instead).
//   - Each client keeps its optimizer (momentum) across rounds in the
//     authors' code; paper-fedtpg sets optimizer.reset_each_round false.
//     Their cosine schedule is stepped once per round the client takes part
//     in (a partially participating client's lr lags); here the schedule
//     follows the global round.
//
// Where this differs from the code, on purpose:
//   - Widths come from the model: E = the text width, D = the embedding dim
//     (the code hard-codes 512 = ViT-B/16's and crashes on other backbones).
//     As in torch, the cross-attention stores one in_proj_weight when D = E
//     and separate q/k/v projections otherwise.
//   - Prompt depth d_ctx is 1 only. The code's deeper prompts are broken:
//     its text transformer replaces positions 1..n_ctx with ctx[1] before
//     block 0, so ctx[0] (inserted at the embedding) is overwritten before
//     any block sees it and gets no gradient, and the image encoder is never
//     given its prompts. d_ctx > 1 is refused with that reason.
//   - The generator is float32 (the code runs it in float16 after
//     meta_net.half()); the initial values are not rounded to float16.
//   - `w`/`score` (KgCoOp vestiges that add 0 to the loss) are left out.
package fedtpg

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

func init() { methods.Register(Method{}) }

// noPosition says why class_token_position is refused: FedTPG's code has
// no position other than end.
const noPosition = "the authors' FedTPG code (boschresearch/FedTPG model/FedTPG.py) has no class-token position: the generated context always precedes the class name (only end)"

// Settings is the fedtpg config section.
type Settings struct {
	// NCtx is the number of generated prompt vectors (the authors' 4).
	NCtx int `yaml:"n_ctx"`
	// DCtx is the prompt depth; only 1 (see the package doc).
	DCtx int `yaml:"d_ctx"`
	// Depth is the number of self-attention layers after the
	// cross-attention (the released run's 0).
	Depth int `yaml:"depth"`
	// CrossHeads and SelfHeads are the attention heads (4; they must divide
	// the text width).
	CrossHeads int `yaml:"cross_heads"`
	SelfHeads  int `yaml:"self_heads"`
	// FFMult is the feed-forward hidden width in text widths (4).
	FFMult int `yaml:"ff_mult"`
	// InitStd is σ of soft_prompt's N(0, σ²) init (0.02).
	InitStd float64 `yaml:"init_std"`
	// WeightedMean weights the server's mean by the clients' sizes; false
	// (the code): the uniform mean over the round's clients.
	WeightedMean bool `yaml:"weighted_mean"`
	// OwnClasses trains each client over the classes of its own training
	// images only — the generator conditioned on their names, the cross
	// entropy over them — as the authors' cross-class clients (true); false
	// trains over the client's whole label space.
	OwnClasses bool `yaml:"own_classes"`
	// ClassTokenPosition is CoOp's class_token_position, accepted only as
	// end (see noPosition).
	ClassTokenPosition string `yaml:"class_token_position,omitempty"`
	// LR, when set, replaces the run's optimizer.lr for this method; 0
	// keeps the run's.
	LR float64 `yaml:"lr"`
}

// Check implements config.Section.
func (s *Settings) Check(c *config.Checker) {
	if p := s.ClassTokenPosition; p != "" && p != prompt.PositionEnd {
		c.Fail("class_token_position", "%q: %s", p, noPosition)
	}
	c.AtLeast("n_ctx", s.NCtx, 1)
	c.AtMost("n_ctx", s.NCtx, 64)
	if s.DCtx != 1 {
		c.Fail("d_ctx", "%d: only 1 is supported (the authors' deeper prompts overwrite the embedding-level vectors "+
			"before block 0, so they get no gradient, and never prompt the image encoder)", s.DCtx)
	}
	c.AtLeast("depth", s.Depth, 0)
	c.AtMost("depth", s.Depth, 12)
	c.AtLeast("cross_heads", s.CrossHeads, 1)
	c.AtMost("cross_heads", s.CrossHeads, 64)
	c.AtLeast("self_heads", s.SelfHeads, 1)
	c.AtMost("self_heads", s.SelfHeads, 64)
	c.AtLeast("ff_mult", s.FFMult, 1)
	c.AtMost("ff_mult", s.FFMult, 16)
	c.NonNegative("init_std", s.InitStd)
	c.NonNegative("lr", s.LR)
}

// train returns the run's local-training settings with this section's lr
// where it is set.
func (s *Settings) train(run train.Options) train.Options {
	return run.Own("", s.LR, 0, 0)
}

func (s *Settings) config(seed uint64) Config {
	return Config{NCtx: s.NCtx, DCtx: s.DCtx, Depth: s.Depth, CrossHeads: s.CrossHeads, SelfHeads: s.SelfHeads,
		FFMult: s.FFMult, InitStd: s.InitStd, Seed: seed}
}

func fromConfig(c Config) *Settings {
	return &Settings{NCtx: c.NCtx, DCtx: c.DCtx, Depth: c.Depth, CrossHeads: c.CrossHeads, SelfHeads: c.SelfHeads,
		FFMult: c.FFMult, InitStd: c.InitStd, OwnClasses: true}
}

// Method is FedTPG for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "fedtpg",
		Trains: "a prompt generator: learnable queries cross-attending to the class names' CLIP text features, GEGLU feed-forward (n_ctx vectors at the embedding)",
		Shares: "the whole generator (uniform mean as the authors' code; weighted_mean: n_i weights)",
		Loader: methods.TorchLoader, // boschresearch/FedTPG: dm_federated.build_data_loader, no drop_last
		Paper:  "Qiu et al., Federated Text-driven Prompt Generation for Vision-Language Models (ICLR 2024)"}
}

// DefaultConfig implements methods.Method.
func (Method) DefaultConfig() config.Section { return fromConfig(DefaultConfig()) }

// Depth implements methods.Method: the image encoder is frozen whole.
func (Method) Depth(config.Section, int) (int, error) { return methods.Features, nil }

func settings(sec config.Section) (*Settings, error) {
	s, err := methods.Section[Settings]("fedtpg", sec)
	if err != nil {
		return nil, err
	}
	return s, s.config(0).Validate()
}

// Shared selects the tensors the server receives: the whole generator.
var Shared = federation.Prefix(Prefix)

// Build implements methods.Method.
func (Method) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	return build(env, s, nil)
}

// build makes the plan; names, when set, gives the bare-name rows [C, ctx]
// of some label spaces (the fixtures' name_tokens) instead of the
// tokenizer.
func build(env *methods.Env, s *Settings, names map[int][]int) (*methods.Plan, error) {
	cfg := s.config(env.Seed)
	if s.OwnClasses {
		env = ownClassEnv(env)
	}
	ctxLen := env.Model.W.Config.Text.ContextLength
	// Each label space's prompt rows and name rows; a learner is built from
	// its prompt rows, and finds each row's name by it.
	byPrompt := map[string][]int{}
	for space := range env.Task.Spaces {
		rows, err := env.ClassPromptTokens(space, client.Placeholder(cfg.NCtx))
		if err != nil {
			return nil, fmt.Errorf("fedtpg: %w", err)
		}
		nr, err := nameRows(env, space, rows, names, cfg.NCtx)
		if err != nil {
			return nil, err
		}
		for k := 0; k < len(rows)/ctxLen; k++ {
			byPrompt[rowKey(rows[k*ctxLen:(k+1)*ctxLen])] = nr[k*ctxLen : (k+1)*ctxLen]
		}
	}
	spec := &client.Spec{Name: "fedtpg", Placeholder: cfg.NCtx, Shared: Shared,
		NewLearner: func(_ int, tokens []int) (client.Learner, error) {
			nr := make([]int, 0, len(tokens))
			for k := 0; k < len(tokens)/ctxLen; k++ {
				r, ok := byPrompt[rowKey(tokens[k*ctxLen:(k+1)*ctxLen])]
				if !ok {
					return nil, fmt.Errorf("fedtpg: prompt row %d belongs to no label space", k)
				}
				nr = append(nr, r...)
			}
			return New(env.Model, tokens, nr, cfg)
		},
		Strategy: func(init tensor.Named) federation.Strategy {
			shared := tensor.Named{}
			for name, t := range init {
				if Shared(name) {
					shared[name] = t.Clone()
				}
			}
			return &strategy.FedAvg{Shared: Shared, Uniform: !s.WeightedMean, Initial: shared}
		}}
	opts := s.train(env.Train)
	spec.Train = &opts
	return client.Build(env, spec)
}

// ownClassEnv returns env, or — when some client's training images do not
// cover its whole label space — a copy whose task gives each such client a
// label space of its own classes (appended after the task's spaces, which
// keep their indices for evaluation) with its labels renumbered into it.
// The shared task is not touched.
func ownClassEnv(env *methods.Env) *methods.Env {
	var task *protocol.Task
	var rows map[int][]int
	L := env.Model.W.Config.Text.ContextLength
	for i, ct := range env.Task.Clients {
		sp := env.Task.Spaces[ct.TrainSpace]
		present := slices.Sorted(maps.Keys(setOf(ct.Labels)))
		if len(present) == len(sp.Classes) {
			continue
		}
		if task == nil {
			t := *env.Task
			t.Spaces, t.Clients = slices.Clone(t.Spaces), slices.Clone(t.Clients)
			task, rows = &t, maps.Clone(env.SpaceTokenRows)
		}
		own := protocol.Space{Name: fmt.Sprintf("%s of client %d", sp.Name, ct.ID)}
		local := map[int]int{}
		for k, y := range present {
			own.Classes, local[y] = append(own.Classes, sp.Classes[y]), k
		}
		c := &task.Clients[i]
		c.Labels = make([]int, len(ct.Labels))
		for k, y := range ct.Labels {
			c.Labels[k] = local[y]
		}
		if r, ok := env.SpaceTokenRows[ct.TrainSpace]; ok { // in-memory tasks: the rows of its classes
			var sub []int
			for _, y := range present {
				sub = append(sub, r[y*L:(y+1)*L]...)
			}
			rows[len(task.Spaces)] = sub
		}
		c.TrainSpace = len(task.Spaces)
		task.Spaces = append(task.Spaces, own)
	}
	if task == nil {
		return env
	}
	e := *env
	e.Task, e.SpaceTokenRows = task, rows
	return &e
}

func setOf(x []int) map[int]bool {
	s := map[int]bool{}
	for _, v := range x {
		s[v] = true
	}
	return s
}

func rowKey(row []int) string { return fmt.Sprint(row) }

// nameRows returns the bare-name rows [C, ctx] of a label space: given, or
// tokenised ("{name}", underscores as spaces), or — in-memory tasks without
// a tokenizer — derived from the prompt rows (NameRows).
func nameRows(env *methods.Env, space int, prompts []int, given map[int][]int, nCtx int) ([]int, error) {
	if r, ok := given[space]; ok {
		if len(r) != len(prompts) {
			return nil, fmt.Errorf("fedtpg: label space %d: %d name token ids for %d prompt token ids", space, len(r), len(prompts))
		}
		return r, nil
	}
	ctxLen := env.Model.W.Config.Text.ContextLength
	if env.Tok == nil {
		return NameRows(prompts, ctxLen, nCtx)
	}
	var out []int
	for _, c := range env.Task.Spaces[space].Classes {
		ids, err := env.Tok.Tokenize(strings.ReplaceAll(env.Task.Dataset.Classes[c], "_", " "), ctxLen, false)
		if err != nil {
			return nil, fmt.Errorf("fedtpg: class name: %w", err)
		}
		out = append(out, ids...)
	}
	return out, nil
}

// Predictor implements methods.Method: the site's generator, prompting
// whatever classes it is given from their names.
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	if _, ok := saved[Prefix+nameSoftPrompt]; !ok {
		return nil, fmt.Errorf("fedtpg: saved site lacks %q", Prefix+nameSoftPrompt)
	}
	return predictor{pe: pe, cfg: s.config(0), saved: saved}, nil
}

type predictor struct {
	pe    methods.PredictEnv
	cfg   Config
	saved tensor.Named
}

func (p predictor) Logits(pixels []float32, B int, classes []string) ([]float32, error) {
	m := p.pe.Model
	ctxLen := m.W.Config.Text.ContextLength
	var tokens, names []int
	for _, c := range classes {
		name := strings.ReplaceAll(c, "_", " ")
		ids, err := p.pe.Tok.Tokenize(client.Placeholder(p.cfg.NCtx)+" "+name+".", ctxLen, false)
		if err != nil {
			return nil, err
		}
		tokens = append(tokens, ids...)
		if ids, err = p.pe.Tok.Tokenize(name, ctxLen, false); err != nil {
			return nil, err
		}
		names = append(names, ids...)
	}
	l, err := New(m, tokens, names, p.cfg)
	if err != nil {
		return nil, err
	}
	if err := prompt.Load(l.Params(), p.saved); err != nil {
		return nil, fmt.Errorf("fedtpg: saved site: %w", err)
	}
	if err := l.Prepare(); err != nil {
		return nil, err
	}
	return l.Logits(m.EncodeImage(pixels, B), B)
}
