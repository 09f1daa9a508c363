// Package fedot is FedOT (federated orthogonal transforms, fedot.md): each
// client keeps a private orthogonal map of the frozen image features and all
// clients train one shared linear classifier on the transformed features.
//
//	h' = w_1 h;   logits = τ · w_g · h'/‖h'‖;   plain cross entropy
//
// w_1 = diag(Q_1 … Q_r) is the Cayley transform of an unconstrained local
// X (init I, so w_1 = I), r blocks (`blocks`: 1 is FedOT, more is
// FedOT(+B)); w_g [K, d] is the only tensor uploaded, averaged uniformly by
// the server (strategy.UniformMean). Runs on cached image features
// (Depth = methods.Features).
//
// Decisions, where the paper (and fedot.md) leave something open:
//
//   - Classes [decision]: w_g has one row per class of the dataset, in the
//     dataset's label order (K = len(Dataset.Classes)); a label space scores
//     with the rows of its classes. Only the training space's rows receive
//     gradients, so under base-to-novel the novel rows stay at their
//     initial text embeddings (changed only by weight decay), i.e. FedOT on
//     Novel is zero-shot CLIP seen through the client's w_1.
//   - Initialisation [decision]: rows = L2-normalised frozen text features
//     of the run's class prompts (env template, "a photo of a {}."); `init:
//     random` draws them U(−1/√d, 1/√d) (PyTorch nn.Linear's default) from
//     the run seed (the paper's RandInit).
//   - τ [decision]: exp(model logit_scale) (100 for released CLIP), or
//     `tau` when set.
//   - Row normalisation [decision]: none, as printed (softmax(τ w_g
//     h'/‖h'‖)): only h' is normalised, so the rows of w_g are free to
//     grow; `normalize_classifier: true` normalises them too (τ·cos). At
//     initialisation both equal zero-shot CLIP exactly.
//   - Blocks [inferred]: the paper's "optimal block size … 256 for FEMNIST,
//     1 for PACS…" is read, as in fedot.md, as r, the number of blocks
//     (Fig. 2 varies "the number of blocks R"); `blocks` must divide d.
//   - Cayley arithmetic [decision]: I − R_j is factored by LU with partial
//     pivoting in float64 once per step (OpenBLAS dgetrf; a pure-Go dgetf2
//     under -tags purego) and the batch is solved against it; w_1 is never
//     formed during training (see Cayley). Orthogonality of the formed
//     w_1 holds to float64 rounding.
//   - Optimiser [decision]: the run's optimiser (SGD, momentum and weight
//     decay of the run's optimizer section, the paper: wd 5e-4, momentum
//     not given) with one learning rate for w_g and X as in Algorithm 1;
//     `lr` overrides the run's optimizer.lr for this method (the paper's
//     5e-5 suits τ = 100: the gradients of w_g carry the factor τ), scaling
//     the run's schedule.
//   - Evaluation [decision]: each client is scored with what it holds after
//     its local training, its own w_g^(i) and w_1^(i) (the personalised
//     model; the convention every method here follows, baselines.md §1).
//     The paper's generalisation entry a_ii (w_g with w_1 = I on an unseen
//     domain) is Plan.Global's w_g.
//   - Ablations (`variant`) [inferred from the paper's one-line
//     descriptions]: fedlt, an unconstrained local W [d, d] (init I);
//     fedadapter, a local residual MLP h' = h + ReLU(h Downᵀ) Upᵀ with
//     hidden width d/4 (CLIP-Adapter's reduction), Down U(−1/√d, 1/√d),
//     Up = 0 (so h' = h at the start); all_global, X averaged with w_g
//     (uniform mean of the unconstrained X; its Cayley transform is still
//     orthogonal); all_local, nothing shared (every client trains alone).
//
// The reference-fixture contract (`pfedmma step` / `pfedmma round`,
// fixture.go) reads w_g and the local map (x, w_1 or adapter.down/up) under
// these names. FedOT has no public code: testdata/fedot holds fixtures of
// an independent float64 PyTorch FedOT written from the paper
// (reference/fedot), which external_test.go checks against the
// production Client.Step and Client.Fit and a Coordinator round.
package fedot

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/tensor"
)

func init() { methods.Register(Method{}) }

// Reference names of the parameters.
const (
	// ParamClassifier is the global classifier w_g [K, d].
	ParamClassifier = "w_g"
	// ParamX is the Cayley parameter X [r, d/r, d/r] (fedot, all_global,
	// all_local).
	ParamX = "x"
	// ParamLinear is FedLT's local map W [d, d].
	ParamLinear = "w_1"
	// ParamDown and ParamUp are FedAdapter's MLP, [k, d] and [d, k].
	ParamDown = "adapter.down"
	ParamUp   = "adapter.up"
	// SiteClasses is the Site entry holding the dataset's class names
	// (a federation.BytesTensor of the names joined by newlines): the row
	// order of w_g, for the Predictor.
	SiteClasses = "classes"
)

// Variants (setting `variant`).
const (
	VariantFedOT      = "fedot"
	VariantFedLT      = "fedlt"
	VariantFedAdapter = "fedadapter"
	VariantAllGlobal  = "all_global"
	VariantAllLocal   = "all_local"
)

// Settings is the fedot config section.
type Settings struct {
	// Variant is fedot (default), or an ablation of the paper: fedlt,
	// fedadapter, all_global, all_local.
	Variant string `yaml:"variant"`
	// Blocks is r, the number of orthogonal blocks of w_1 (1: FedOT; more:
	// FedOT(+B)); it must divide the feature dimension.
	Blocks int `yaml:"blocks"`
	// Init is the classifier's initialisation: text (the class prompts'
	// normalised text features) or random.
	Init string `yaml:"init"`
	// NormalizeClassifier L2-normalises the rows of w_g in the logits too.
	NormalizeClassifier bool `yaml:"normalize_classifier"`
	// Tau is the logit temperature τ; 0 means exp(model logit_scale).
	Tau float64 `yaml:"tau"`
	// LR, when positive, replaces the run's optimizer.lr for this method.
	LR float64 `yaml:"lr"`
}

// Check implements config.Section.
func (s *Settings) Check(c *config.Checker) {
	c.OneOf("variant", s.Variant, VariantFedOT, VariantFedLT, VariantFedAdapter, VariantAllGlobal, VariantAllLocal)
	c.AtLeast("blocks", s.Blocks, 1)
	if s.Blocks > 1 && (s.Variant == VariantFedLT || s.Variant == VariantFedAdapter) {
		c.Fail("blocks", "%d blocks need an orthogonal variant (fedot, all_global, all_local), not %s", s.Blocks, s.Variant)
	}
	c.OneOf("init", s.Init, "text", "random")
	c.NonNegative("tau", s.Tau)
	c.NonNegative("lr", s.LR)
}

// Method is FedOT for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "fedot",
		Trains: "a linear classifier w_g and a private Cayley-orthogonal map of the frozen image features (r blocks)",
		Shares: "w_g only (uniform mean)",
		Loader: methods.TorchLoader, // no authors' code: PyTorch's default, every example trains
		Paper:  "FedOT: federated orthogonal transforms for black-box foundation models (fedot-paper)"}
}

// DefaultConfig implements methods.Method: FedOT with one block and the
// text initialisation.
func (Method) DefaultConfig() config.Section {
	return &Settings{Variant: VariantFedOT, Blocks: 1, Init: "text"}
}

// Depth implements methods.Method: the image encoder is a frozen black box.
func (Method) Depth(config.Section, int) (int, error) { return methods.Features, nil }

func settings(sec config.Section) (*Settings, error) {
	s, ok := sec.(*Settings)
	if !ok || s == nil {
		return nil, fmt.Errorf("fedot: config section is %T, want *fedot.Settings", sec)
	}
	return s, nil
}

// shared is the filter of the tensors the server averages.
func (s *Settings) shared() federation.Filter {
	switch s.Variant {
	case VariantAllGlobal:
		return federation.Names(ParamClassifier, ParamX)
	case VariantAllLocal:
		return federation.Names()
	}
	return federation.Names(ParamClassifier)
}

// Shapes returns the parameters' shapes for feature dimension d and K
// classes.
func (s *Settings) Shapes(d, K int) map[string][]int {
	out := map[string][]int{ParamClassifier: {K, d}}
	switch s.Variant {
	case VariantFedLT:
		out[ParamLinear] = []int{d, d}
	case VariantFedAdapter:
		k := max(d/4, 1)
		out[ParamDown], out[ParamUp] = []int{k, d}, []int{d, k}
	default:
		out[ParamX] = []int{s.Blocks, d / s.Blocks, d / s.Blocks}
	}
	return out
}

// initLocal sets the local parameters' initial values (w_1 = I, or the
// adapter's).
func (s *Settings) initLocal(p tensor.Named, rng *rand.Rand) {
	for name, t := range p {
		switch name {
		case ParamX:
			IdentityX(t.Data, t.Shape[0], t.Shape[1])
		case ParamLinear:
			IdentityX(t.Data, 1, t.Shape[0])
		case ParamDown:
			uniform(t.Data, rng, 1/math.Sqrt(float64(t.Shape[1])))
		case ParamUp:
			clear(t.Data)
		}
	}
}

func uniform(x []float32, rng *rand.Rand, bound float64) {
	for i := range x {
		x[i] = float32((2*rng.Float64() - 1) * bound)
	}
}

// scaled multiplies a schedule's rates by a factor (the method's own lr).
type scaled struct {
	s optim.Schedule
	f float64
}

func (s scaled) LR(t int) float64 { return s.f * s.s.LR(t) }

// trainOptions is the run's local training with the method's lr.
func (s *Settings) trainOptions(o train.Options) train.Options {
	if s.LR > 0 {
		if o.Schedule != nil && o.LR > 0 {
			o.Schedule = scaled{o.Schedule, s.LR / o.LR}
		}
		o.LR = s.LR
	}
	return o
}

// Build implements methods.Method.
func (Method) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	if env.Start != methods.Features {
		return nil, fmt.Errorf("fedot: needs cached image features, the run caches depth %d", env.Start)
	}
	d, K := env.Model.W.Config.EmbedDim, len(env.Task.Dataset.Classes)
	if d%s.Blocks != 0 {
		return nil, fmt.Errorf("fedot: blocks %d do not divide the feature dimension %d", s.Blocks, d)
	}
	w, err := newWork(env, s, d, K)
	if err != nil {
		return nil, err
	}
	init := tensor.Named{}
	for name, shape := range s.Shapes(d, K) {
		init[name] = tensor.New(shape...)
	}
	rng := rand.New(rand.NewPCG(env.Seed, 0xfed07))
	if err := initClassifier(env, s, init[ParamClassifier], rng); err != nil {
		return nil, err
	}
	s.initLocal(init, rng)
	filter := s.shared()
	opts := s.trainOptions(env.Train)
	names := federation.BytesTensor([]byte(strings.Join(env.Task.Dataset.Classes, "\n")))
	return client.Build(env, &client.Spec{Name: "fedot", NoPrompts: true, Shared: filter, Train: &opts,
		NewLearner: func(space int, _ []int) (client.Learner, error) {
			return &learner{m: w, p: init.Clone(), classes: env.Task.Spaces[space].Classes}, nil
		},
		Strategy: func(init tensor.Named) federation.Strategy {
			initial := tensor.Named{}
			for name, t := range init {
				if filter(name) {
					initial[name] = t.Clone()
				}
			}
			return strategy.UniformMean(filter, initial)
		},
		// the site keeps the class names with its parameters
		Site: func(*client.Client) (any, error) { return site{names}, nil }})
}

// initClassifier fills w_g [K, d]: the normalised text features of every
// label space's class prompts, or random rows.
func initClassifier(env *methods.Env, s *Settings, wg *tensor.Tensor, rng *rand.Rand) error {
	d := wg.Shape[1]
	if s.Init == "random" {
		uniform(wg.Data, rng, 1/math.Sqrt(float64(d)))
		return nil
	}
	if env.Init != nil {
		return nil // replaced by the given parameters
	}
	z := &methods.FrozenScorer{Env: env}
	for sp, space := range env.Task.Spaces {
		txt, err := z.TextFeatures(sp)
		if err != nil {
			return fmt.Errorf("fedot: text features of label space %s: %w", space.Name, err)
		}
		for i, c := range space.Classes {
			copy(wg.Data[c*d:(c+1)*d], txt[i*d:(i+1)*d])
		}
	}
	clip.NormalizeRows(nil, wg.Data, wg.Shape[0], d)
	for i := 0; i < wg.Shape[0]; i++ { // classes in no space: zero rows, not NaN
		row := wg.Data[i*d : (i+1)*d]
		if row[0] != row[0] {
			clear(row)
		}
	}
	return nil
}
