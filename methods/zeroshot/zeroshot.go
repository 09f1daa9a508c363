// Package zeroshot is frozen CLIP (Radford et al., 2021): no training;
// every client classifies with the class prompts' text features. It runs
// from whatever frozen prefix the run caches, finishing both encoders, which
// is exactly the full model.
//
// Its client is its own, not methods/client's, for a documented reason:
// the generic client exists to train (a training loop with an optimizer
// and a generator, a learner's step, install and upload of shared tensors,
// state under param/), and zero-shot has none of it — its Fit returns at
// once, its State is empty, it runs from any cached depth (AnyDepth, which
// client.Spec's Input does not express), and it scores each evaluation set
// the clients share once for all of them. On client.Client that would take
// a learner whose Step never runs, a loop with nothing to update and a
// state holding an optimizer of nothing; the client below is those few
// lines instead (ID, NumExamples, an empty Fit, the shared evaluation).
package zeroshot

import (
	"context"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
)

func init() { methods.Register(Method{}) }

// Method is zero-shot CLIP for the methods registry.
type Method struct{}

// Info implements methods.Method.
func (Method) Info() methods.Info {
	return methods.Info{Name: "zeroshot", Trains: "nothing (frozen CLIP)", Shares: "nothing",
		Paper: "Radford et al., Learning Transferable Visual Models From Natural Language Supervision (2021)"}
}

// DefaultConfig implements methods.Method: zero-shot has no settings.
func (Method) DefaultConfig() config.Section { return nil }

// Frozen implements methods.Frozen: zero-shot CLIP trains nothing.
func (Method) Frozen() bool { return true }

// Depth implements methods.Method: any cached depth will do.
func (Method) Depth(config.Section, int) (int, error) { return methods.AnyDepth, nil }

// Build implements methods.Method: one untrained client per task client;
// evaluation sets shared by clients are scored once.
func (Method) Build(env *methods.Env, _ config.Section) (*methods.Plan, error) {
	sh := &shared{sc: &methods.FrozenScorer{Env: env}, done: map[*protocol.EvalSet]float64{}}
	plan := &methods.Plan{}
	for i := range env.Task.Clients {
		plan.Clients = append(plan.Clients, &client{env: env, task: &env.Task.Clients[i], sh: sh})
	}
	return plan, nil
}

// Predictor implements methods.Method: the frozen model.
func (Method) Predictor(pe methods.PredictEnv, _ config.Section, _ tensor.Named) (methods.Predictor, error) {
	return predictor{pe}, nil
}

type shared struct {
	sc   *methods.FrozenScorer
	done map[*protocol.EvalSet]float64
}

type client struct {
	env  *methods.Env
	task *protocol.ClientTask
	sh   *shared
}

func (c *client) ID() int          { return c.task.ID }
func (c *client) NumExamples() int { return len(c.task.Train) }

func (c *client) Fit(context.Context, federation.FitIns) (federation.FitRes, error) {
	return federation.FitRes{NumExamples: len(c.task.Train)}, nil
}

func (c *client) Evaluate(ctx context.Context, _ federation.EvaluateIns) (federation.EvaluateRes, error) {
	m := eval.Metrics{}
	sets := c.env.EvalSets(c.task)
	for i, set := range c.task.Evals {
		acc, ok := c.sh.done[set]
		if !ok {
			r, err := c.env.Evaluator.Accuracy(ctx, c.sh.sc, sets[i:i+1])
			if err != nil {
				return federation.EvaluateRes{}, err
			}
			acc = r[set.Name]
			c.sh.done[set] = acc
		}
		m[set.Name] = acc
	}
	if c.env.Task.Protocol == protocol.BaseToNovel {
		eval.WithHM(m)
	}
	return federation.EvaluateRes{Metrics: m, NumExamples: len(c.task.Train)}, nil
}

func (c *client) State() (tensor.Named, error) { return tensor.Named{}, nil }
func (c *client) LoadState(tensor.Named) error { return nil }

type predictor struct{ pe methods.PredictEnv }

func (p predictor) Logits(pixels []float32, B int, classes []string) ([]float32, error) {
	m := p.pe.Model
	tokens, err := p.pe.Tokens(classes)
	if err != nil {
		return nil, err
	}
	methods.DetachAll(m)
	img := append([]float32(nil), m.EncodeImage(pixels, B)...)
	txt, err := m.EncodeText(tokens, len(classes))
	if err != nil {
		return nil, err
	}
	E := m.W.Config.EmbedDim
	return clip.Logits(img, txt, B, len(classes), E, m.W.LogitScale), nil
}
