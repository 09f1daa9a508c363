// Package methods is the seam between the experiment runner and the
// federated methods. A Method (one package under methods/, registered with
// one line in methods/all) says what it trains and shares, owns its config
// section, declares how deep its frozen part goes, and builds its clients
// and server strategy on an Env: the frozen model, the task and the cached
// frozen prefixes every method of a run shares.
//
// The package is split by concern: methods.go holds the contracts (Method,
// Plan, Predictor), registry.go the registry, hooks.go the optional hooks
// a method may implement, env.go and envfill.go the runtime Env, and
// scorer.go the scorers built on it. The prefix cache is methods/prefixcache
// and the reference-fixture harness the parity package.
package methods

import (
	"fmt"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods/prefixcache"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/tokenizer"
)

// Info describes a method for `pfedmma methods` and reports.
type Info struct {
	// Name is the config name (methods: [name]).
	Name string
	// Trains and Shares say what each site trains and what the server
	// aggregates; Paper cites the method.
	Trains, Shares, Paper string
	// Loader is what the authors' training loader does with an epoch's
	// partial last batch: what train.drop_last auto does for the method
	// ("" for a method that does not train).
	Loader Loader
}

// Loader is a method's authors' training loader, by what it does with an
// epoch's partial last batch.
type Loader string

// The training loaders of the authors' code.
const (
	// DasslLoader drops the partial last batch when the client holds at
	// least one full batch: Dassl's build_data_loader, drop_last =
	// is_train and len(data_source) >= batch_size (the CoOp family).
	DasslLoader Loader = "dassl"
	// TorchLoader keeps it: PyTorch's DataLoader with drop_last=False,
	// its default.
	TorchLoader Loader = "torch"
)

// DropsLast says whether the loader drops a partial last batch.
func (l Loader) DropsLast() bool { return l == DasslLoader }

// Depths that are not a block number.
const (
	// AnyDepth is the Depth of a method that runs from whatever the other
	// methods of the run cache (zero-shot CLIP).
	AnyDepth = -1
	// Features caches each image's final features [E]: the whole image
	// encoder is frozen (prompt learners, feature-level methods).
	Features = prefixcache.Features
	// TokenFeatures caches every token's features after ln_post @ proj,
	// [T, E] (FedOTP's optimal transport over patches); token 0 is the
	// image feature.
	TokenFeatures = prefixcache.TokenFeatures
	// Embeddings caches ln_pre's input [T, Dv] (class and patch embeddings
	// plus positions, before ln_pre), then the frozen image features [E] of
	// the image and [E] of its horizontal mirror (FedMVP: visual prompts from
	// the patch embeddings, a consistency loss against zero-shot CLIP on a
	// randomly flipped view).
	Embeddings = prefixcache.Embeddings
)

// Method is one federated method.
type Method interface {
	Info() Info
	// DefaultConfig returns the method's config section with the paper's
	// defaults, or nil when it has no settings.
	DefaultConfig() config.Section
	// Depth is ℓ, the first block of the encoders the method runs per step
	// given its settings and the model's depth (blocks before ℓ are the
	// frozen prefix, cached once per image; 0: the embeddings run too), or
	// Features, TokenFeatures, Embeddings or AnyDepth.
	Depth(sec config.Section, layers int) (int, error)
	// Build makes the method's clients (one per task client, in task
	// order) and its server strategy on env. A nil Strategy means the
	// method does not train: each client is evaluated once.
	Build(env *Env, sec config.Section) (*Plan, error)
	// Predictor rebuilds one site's classifier from the tensors Plan.Site
	// gave for it.
	Predictor(p PredictEnv, sec config.Section, saved tensor.Named) (Predictor, error)
}

// Splitter is implemented by a method whose first block ℓ = Depth only adds
// a branch parallel to the whole frozen block (pFedMMA's adapter): its
// records may then be split records (prefixcache.Prefixer.Split), block ℓ's
// branch input and frozen output, so that block ℓ runs once per image.
type Splitter interface {
	// SplitRecords reports whether the method wants split records given
	// its settings and the model's depth.
	SplitRecords(sec config.Section, layers int) (bool, error)
}

// SplitRecords reports whether meth wants split records (Splitter); false
// for a method that is not a Splitter.
func SplitRecords(meth Method, sec config.Section, layers int) (bool, error) {
	s, ok := meth.(Splitter)
	if !ok {
		return false, nil
	}
	return s.SplitRecords(sec, layers)
}

// Plan is a method's federation on one Env.
type Plan struct {
	Clients  []federation.Client
	Strategy federation.Strategy
	// Site returns what a site keeps after training (its personalised
	// parameters, reference names) for `pfedmma predict`; nil: nothing.
	Site func(client int) (tensor.Named, error)
	// Global returns the server's shared tensors after training; nil:
	// nothing.
	Global func() tensor.Named
	// Uploads declares the tensors a client may upload beyond the
	// strategy's global ones (name → shape): the per-client tensors a
	// strategy relays (ADAPT's text prompts). The network's upload check
	// and the conformance suite's privacy check read the global tensors
	// and these.
	Uploads map[string][]int
	// GlobalScorer, when set, is the global model (what a new site would
	// start from: the server's tensors on the initial private part), scored
	// on the task's GlobalEvals (held-out domains, unseen writers).
	GlobalScorer func() (eval.Scorer, error)
}

// PredictEnv is what a Predictor is built on: the frozen model, its
// tokenizer and the run's prompt template ("a photo of a {}.").
type PredictEnv struct {
	Model    *clip.Model
	Tok      *tokenizer.Tokenizer
	Template string
}

// Prompt returns the template's prompt of a class name.
func (p PredictEnv) Prompt(class string) string {
	return strings.ReplaceAll(p.Template, "{}", strings.ReplaceAll(class, "_", " "))
}

// Tokens tokenises the template's prompts of classes: [C, ctx].
func (p PredictEnv) Tokens(classes []string) ([]int, error) {
	var out []int
	for _, c := range classes {
		ids, err := p.Tok.Tokenize(p.Prompt(c), p.Model.W.Config.Text.ContextLength, false)
		if err != nil {
			return nil, err
		}
		out = append(out, ids...)
	}
	return out, nil
}

// ClassPromptTokens tokenises "<prefix> <class>." for every class
// ([C, ctx]): the learnable-prompt rows of CoOp-style methods, whose prefix
// is n_ctx placeholder words, as Env.ClassPromptTokens builds them for
// training.
func (p PredictEnv) ClassPromptTokens(classes []string, prefix string) ([]int, error) {
	var out []int
	for _, c := range classes {
		ids, err := p.Tok.Tokenize(prefix+" "+strings.ReplaceAll(c, "_", " ")+".", p.Model.W.Config.Text.ContextLength, false)
		if err != nil {
			return nil, err
		}
		out = append(out, ids...)
	}
	return out, nil
}

// Predictor classifies preprocessed images with a site's personalised
// model.
type Predictor interface {
	// Logits scores pixels [B, 3, S, S] against classes (names): [B, C].
	Logits(pixels []float32, B int, classes []string) ([]float32, error)
}

// Section returns sec as the settings of method name, *T (its DefaultConfig's
// type): an error naming the method and both types when sec is another type
// or nil.
func Section[T any, PT interface {
	*T
	config.Section
}](name string, sec config.Section) (PT, error) {
	s, ok := sec.(PT)
	if !ok || s == nil {
		return nil, fmt.Errorf("%s: config section is %T, want %T", name, sec, PT(nil))
	}
	return s, nil
}
