// Package clipadapter is federated CLIP-Adapter (baselines.md §5): a
// residual two-layer adapter on the frozen image features,
//
//	f' = α·ReLU(ReLU(f W1ᵀ) W2ᵀ) + (1 − α)·f,   W1 [d/4, d], W2 [d, d/4]
//
// (no biases, α = 0.2, reduction 4), scored by exp(logit_scale)·cos against
// the frozen text features of the class prompts, trained with cross
// entropy on cached image features (Depth = methods.Features). Both
// matrices are averaged by FedAvg (weights n_i); there is one global model
// and no private part.
//
// Decisions:
//   - Text features: the run's template (env.SpaceTokens, "a photo of a
//     {}." unless the run sets another), not CLIP-Adapter's per-dataset
//     templates: the run's template is the one every method here shares;
//     a dataset-specific template is a run setting.
//   - Initialisation: PyTorch nn.Linear's default, U(−1/√in, 1/√in) per
//     matrix, drawn from the run seed.
//   - Evaluation: every client scores the global adapter, the server's
//     latest average, which the strategy sends every client for its
//     evaluation (FedAvg.EvaluateGlobal), in simulation as over the
//     network; the site then keeps it (predict uses it).
//   - Names follow CLIP-Adapter's module: adapter.fc.0.weight (W1),
//     adapter.fc.2.weight (W2).
//
// The reference-fixture contract (`pfedmma step` / `pfedmma round`,
// fixture.go) reads the adapter under these names. testdata/clip_adapter
// holds fixtures made by the authors' code (gaopengcuhk/CLIP-Adapter,
// federated with the pFedMMA authors' FedAvg); external_test.go checks the
// production Client.Step and Client.Fit and a Coordinator round against
// them.
package clipadapter

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/federation/strategy"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/tensor"
)

func init() { methods.Register(Method{}) }

// Reference names of the adapter's matrices.
const (
	ParamW1 = "adapter.fc.0.weight" // [d/r, d]
	ParamW2 = "adapter.fc.2.weight" // [d, d/r]
)

// Settings is the clip_adapter config section.
type Settings struct {
	// Ratio is the residual ratio α (0.2).
	Ratio float64 `yaml:"ratio"`
	// Reduction is the bottleneck's reduction factor (4: d → d/4 → d).
	Reduction int `yaml:"reduction"`
	// LR, when positive, replaces the run's optimizer.lr for this method.
	LR float64 `yaml:"lr"`
}

// Check implements config.Section.
func (s *Settings) Check(c *config.Checker) {
	c.Range("ratio", s.Ratio, 0, 1)
	c.AtLeast("reduction", s.Reduction, 1)
	c.NonNegative("lr", s.LR)
}

// Method is federated CLIP-Adapter for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "clip_adapter",
		Trains: "a residual two-layer adapter of the frozen image features (d → d/4 → d, ratio 0.2)",
		Shares: "the whole adapter (FedAvg, weights n_i)",
		Loader: methods.DasslLoader, // gaopengcuhk/CLIP-Adapter: a Dassl TrainerX
		Paper:  "Gao et al., CLIP-Adapter: Better Vision-Language Models with Feature Adapters (2021)"}
}

// DefaultConfig implements methods.Method: CLIP-Adapter's α 0.2, reduction 4.
func (Method) DefaultConfig() config.Section { return &Settings{Ratio: 0.2, Reduction: 4} }

// Depth implements methods.Method: the image encoder is frozen whole.
func (Method) Depth(config.Section, int) (int, error) { return methods.Features, nil }

func settings(sec config.Section) (*Settings, error) {
	s, ok := sec.(*Settings)
	if !ok || s == nil {
		return nil, fmt.Errorf("clip_adapter: config section is %T, want *clipadapter.Settings", sec)
	}
	return s, nil
}

// Shapes returns the adapter's shapes on d-dimensional features.
func (s *Settings) Shapes(d int) map[string][]int {
	k := max(d/s.Reduction, 1)
	return map[string][]int{ParamW1: {k, d}, ParamW2: {d, k}}
}

// Init draws the adapter's initial matrices (nn.Linear's default).
func (s *Settings) Init(d int, rng *rand.Rand) tensor.Named {
	p := tensor.Named{}
	for _, name := range []string{ParamW1, ParamW2} {
		shape := s.Shapes(d)[name]
		t := tensor.New(shape...)
		bound := 1 / math.Sqrt(float64(shape[1]))
		for i := range t.Data {
			t.Data[i] = float32((2*rng.Float64() - 1) * bound)
		}
		p[name] = t
	}
	return p
}

// Build implements methods.Method: every client starts from the seeded
// adapter; FedAvg averages both matrices and sends the average to every
// client for its evaluation.
func (Method) Build(env *methods.Env, sec config.Section) (*methods.Plan, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	if env.Start != methods.Features {
		return nil, fmt.Errorf("clip_adapter: needs cached image features, the run caches depth %d", env.Start)
	}
	d := env.Model.W.Config.EmbedDim
	init := s.Init(d, rand.New(rand.NewPCG(env.Seed, 0xada97e)))
	w := &Model{Adapter: Adapter{Alpha: float32(s.Ratio)}, D: d, K: init[ParamW1].Shape[0],
		Scale: env.Model.W.LogitScale, Grads: tensor.Named{}, z: &methods.FrozenScorer{Env: env}}
	for name, t := range init {
		w.Grads[name] = tensor.New(t.Shape...)
	}
	shared := federation.Names(ParamW1, ParamW2)
	opts := env.Train.Own("", s.LR, 0, 0)
	return client.Build(env, &client.Spec{Name: "clip_adapter", NoPrompts: true, Shared: shared, Train: &opts,
		NewLearner: func(space int, _ []int) (client.Learner, error) {
			return &learner{m: w, p: init.Clone(), space: space}, nil
		},
		Strategy: func(init tensor.Named) federation.Strategy {
			return &strategy.FedAvg{Shared: shared, Initial: init.Clone(), EvaluateGlobal: true}
		}})
}

// learner is the shared model with a label space's adapter.
type learner struct {
	m     *Model
	p     tensor.Named
	space int
	txt   []float32
}

func (l *learner) Params() tensor.Named { return l.p }
func (l *learner) Grads() tensor.Named  { return l.m.Grads }

// Step implements client.Learner on cached image features.
func (l *learner) Step(img []float32, labels []int) (float64, map[string]float64, []float32, error) {
	txt, err := l.m.textFeatures(l.space)
	if err != nil {
		return 0, nil, nil, err
	}
	loss, logits := l.m.step(l.p, img, labels, txt)
	return loss, nil, logits, nil
}

// Prepare implements client.Learner: the space's frozen text features.
func (l *learner) Prepare() (err error) {
	l.txt, err = l.m.textFeatures(l.space)
	return err
}

// Logits implements client.Learner.
func (l *learner) Logits(img []float32, B int) ([]float32, error) {
	return l.m.Logits(l.p, img, B, l.txt), nil
}

// Model is the adapter with its cosine head and buffers, shared by the
// clients of a method (they run one at a time).
type Model struct {
	Adapter
	D, K int
	// Scale is CLIP's logit_scale (log of the multiplier).
	Scale float32
	// Grads has the shapes of the adapter's matrices.
	Grads tensor.Named
	head  clip.CosineLogits
	z     *methods.FrozenScorer
	text  map[int][]float32 // frozen text features per label space

	fp, dfp, dtxt, dlogits []float32
}

// textFeatures returns (once computed) the frozen text features [C, d] of
// a label space's class prompts.
func (m *Model) textFeatures(space int) ([]float32, error) {
	if f, ok := m.text[space]; ok {
		return f, nil
	}
	f, err := m.z.TextFeatures(space)
	if err != nil {
		return nil, fmt.Errorf("clip_adapter: text features of label space %d: %w", space, err)
	}
	if m.text == nil {
		m.text = map[int][]float32{}
	}
	m.text[space] = append([]float32(nil), f...)
	return m.text[space], nil
}

// Logits scores features f [B, d] against text features txt [C, d] with
// the adapter p: [B, C], owned by m.
func (m *Model) Logits(p tensor.Named, f []float32, B int, txt []float32) []float32 {
	d := m.D
	m.fp = nn.Grow(m.fp, B*d)
	m.Forward(m.fp, f, p[ParamW1].Data, p[ParamW2].Data, B, d, m.K)
	return m.head.Forward(m.fp, txt, B, len(txt)/d, d, m.Scale)
}

// Step computes the mean cross entropy of features f [B, d] with labels
// against txt [C, d] and overwrites m.Grads; it returns the loss and the
// number of correct predictions.
func (m *Model) Step(p tensor.Named, f []float32, labels []int, txt []float32) (float64, int) {
	loss, logits := m.step(p, f, labels, txt)
	C := len(txt) / m.D
	correct := 0
	for k, y := range labels {
		if eval.Argmax(logits[k*C:(k+1)*C]) == y {
			correct++
		}
	}
	return loss, correct
}

// step is Step, returning the logits [B, C] (owned by m) instead of the
// count.
func (m *Model) step(p tensor.Named, f []float32, labels []int, txt []float32) (float64, []float32) {
	for _, g := range m.Grads {
		clear(g.Data)
	}
	B, C, d := len(labels), len(txt)/m.D, m.D
	logits := m.Logits(p, f, B, txt)
	m.dlogits = nn.Grow(m.dlogits, B*C)
	loss := clip.CrossEntropy(logits, labels, B, C, m.dlogits)
	m.dfp, m.dtxt = nn.Grow(m.dfp, B*d), nn.Grow(m.dtxt, C*d)
	m.head.Backward(m.dlogits, m.dfp, m.dtxt)
	m.Backward(m.Grads[ParamW1].Data, m.Grads[ParamW2].Data, m.dfp, f, p[ParamW2].Data, d, m.K)
	return loss, logits
}

// Predictor implements methods.Method: the saved adapter on the frozen
// model, against the template's prompts.
func (Method) Predictor(pe methods.PredictEnv, sec config.Section, saved tensor.Named) (methods.Predictor, error) {
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	d := pe.Model.W.Config.EmbedDim
	p := tensor.Named{}
	for name, shape := range s.Shapes(d) {
		t, ok := saved[name]
		if !ok || !tensor.SameShape(t.Shape, shape) {
			return nil, fmt.Errorf("clip_adapter: saved site lacks %q of shape %v", name, shape)
		}
		p[name] = t
	}
	m := &Model{Adapter: Adapter{Alpha: float32(s.Ratio)}, D: d, K: p[ParamW1].Shape[0], Scale: pe.Model.W.LogitScale}
	return predictor{pe: pe, m: m, p: p}, nil
}

type predictor struct {
	pe methods.PredictEnv
	m  *Model
	p  tensor.Named
}

func (pr predictor) Logits(pixels []float32, B int, classes []string) ([]float32, error) {
	model := pr.pe.Model
	tokens, err := pr.pe.Tokens(classes)
	if err != nil {
		return nil, err
	}
	methods.DetachAll(model)
	img := append([]float32(nil), model.EncodeImage(pixels, B)...)
	txt, err := model.EncodeText(tokens, len(classes))
	if err != nil {
		return nil, err
	}
	txt = append([]float32(nil), txt...)
	return append([]float32(nil), pr.m.Logits(pr.p, img, B, txt)...), nil
}
