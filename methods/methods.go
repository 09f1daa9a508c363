// Package methods is the seam between the experiment runner and the
// federated methods. A Method (one package under methods/, registered with
// one line in methods/all) says what it trains and shares, owns its config
// section, declares how deep its frozen part goes, and builds its clients
// and server strategy on an Env: the frozen model, the task and the cached
// frozen prefixes every method of a run shares.
package methods

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
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
}

// Depths that are not a block number.
const (
	// AnyDepth is the Depth of a method that runs from whatever the other
	// methods of the run cache (zero-shot CLIP).
	AnyDepth = -1
	// Features caches each image's final features [E]: the whole image
	// encoder is frozen (prompt learners, feature-level methods).
	Features = -2
	// TokenFeatures caches every token's features after ln_post @ proj,
	// [T, E] (FedOTP's optimal transport over patches); token 0 is the
	// image feature.
	TokenFeatures = -3
	// Embeddings caches ln_pre's input [T, Dv] (class and patch embeddings
	// plus positions, before ln_pre), then the frozen image features [E] of
	// the image and [E] of its horizontal mirror (FedMVP: visual prompts from
	// the patch embeddings, a consistency loss against zero-shot CLIP on a
	// randomly flipped view).
	Embeddings = -4
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

// TaskChecker is a method with settings that depend on the federation
// (pFedMoAP's number of experts against the number of clients): the runner
// calls it before any work starts.
type TaskChecker interface {
	CheckTask(sec config.Section, clients int) error
}

// SmallRun is a method whose default settings do not fit a small run —
// the conformance suite's tiny world (the embedded CLIP, whose prompts are
// 24 tokens long, a few clients and classes): SmallSettings returns the
// overrides for a run with that many clients, keyed by setting name within
// the method's section ({"n_ctx": "8"}). A method whose defaults fit needs
// none.
type SmallRun interface {
	SmallSettings(clients int) map[string]string
}

// SurrogateGradient is a Stepper whose gradient is, by its reference's
// design, not the gradient of the loss it reports (FedOTP holds the
// optimal-transport plan constant in the backward pass): the conformance
// suite checks its step without finite differences, which the method's own
// tests run with the held part fixed. The string says what is held.
type SurrogateGradient interface {
	SurrogateGradient() string
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

var (
	mu       sync.RWMutex
	registry = map[string]Method{}
)

// Register adds a method (and its config section). Method packages call it
// from init; registering a name twice panics.
func Register(m Method) {
	name := m.Info().Name
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[name]; dup {
		panic("methods: " + name + " registered twice")
	}
	registry[name] = m
	var defaults func() config.Section
	if m.DefaultConfig() != nil {
		defaults = m.DefaultConfig
	}
	config.RegisterMethod(name, defaults)
}

// Get returns a registered method; an unknown name is an error listing the
// registered ones.
func Get(name string) (Method, error) {
	mu.RLock()
	defer mu.RUnlock()
	m, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("unknown method %q (available: %s)", name, strings.Join(config.Methods(), ", "))
	}
	return m, nil
}

// All returns the registered methods in registration order.
func All() []Method {
	mu.RLock()
	defer mu.RUnlock()
	var out []Method
	for _, n := range config.Methods() {
		if m, ok := registry[n]; ok {
			out = append(out, m)
		}
	}
	return out
}

// Names lists the registered method names, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// CosineScorer scores with exp(logit_scale)·cos between image features of
// prefixes and per-space text features: the classifier of every method whose
// logits are CLIP's.
type CosineScorer struct {
	Model *clip.Model
	Text  func(space int) ([]float32, error)
	Image func(prefix []float32, B int) []float32
}

// Logits implements eval.Scorer.
func (s CosineScorer) Logits(space int, prefix []float32, B int) ([]float32, error) {
	txt, err := s.Text(space)
	if err != nil {
		return nil, err
	}
	txt = append([]float32(nil), txt...) // the image pass may reuse the text buffers
	img := s.Image(prefix, B)
	E := s.Model.W.Config.EmbedDim
	return clip.Logits(img, txt, B, len(txt)/E, E, s.Model.W.LogitScale), nil
}

var _ eval.Scorer = CosineScorer{}
