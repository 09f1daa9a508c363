package methods

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/tensor"
)

// BatchScorer is a client that can score with its current parameters; the
// generic step uses it for the "logits" of the batch before the update.
type BatchScorer interface {
	Scorer() (eval.Scorer, error)
}

// LearnerStep runs `pfedmma step` for a method whose client is a
// train.Learner, through the production client: one client holding the
// fixture's "images" [B,3,S,S] and "labels" [B] over the class prompts
// "tokens" [C,ctx], its parameters from f.Params (the method's names),
// one Step on the whole batch in stored order, then one SGD step from a
// fresh optimizer (lr, momentum, weight_decay from the metadata). It
// writes "loss", "train_correct", "logits" [B,C] (when the client is a
// BatchScorer), "grad.<param>" and "step1.<param>". The random generator
// the step draws from (dropout, views) is PCG(seed, 0), seed from the
// metadata (0 when absent).
func LearnerStep(ctx context.Context, meth Method, sec config.Section, f *Fixture) (tensor.Named, error) {
	name := meth.Info().Name
	images, err := f.Tensor("images")
	if err != nil {
		return nil, err
	}
	labels, err := f.IntsOf("labels")
	if err != nil {
		return nil, err
	}
	tokens, err := f.IntsOf("tokens")
	if err != nil {
		return nil, err
	}
	opts, err := f.TrainOptions()
	if err != nil {
		return nil, err
	}
	seed, err := f.FloatOr("seed", 0)
	if err != nil {
		return nil, err
	}
	B := len(labels)
	if B == 0 {
		return nil, fmt.Errorf("%s step: the batch has no labels", name)
	}
	opts.Batch, opts.Epochs = B, 1
	m := f.Model
	depth, err := meth.Depth(sec, min(m.W.Config.Vision.Layers, m.W.Config.Text.Layers))
	if err != nil {
		return nil, err
	}
	if depth == AnyDepth {
		return nil, fmt.Errorf("%s does not train", name)
	}
	C := len(tokens) / m.W.Config.Text.ContextLength
	env, err := TensorEnv(m, depth, tokens, C, []TensorClient{{Pixels: images.Data, Labels: labels}}, opts, uint64(seed))
	if err != nil {
		return nil, err
	}
	defer env.TrainStore.Close()
	env.Init = f.Params
	plan, err := meth.Build(env, sec)
	if err != nil {
		return nil, err
	}
	if len(plan.Clients) != 1 {
		return nil, fmt.Errorf("%s step: %d clients built for one batch", name, len(plan.Clients))
	}
	l, ok := plan.Clients[0].(train.Learner)
	if !ok {
		return nil, fmt.Errorf("%s step: its client is not a train.Learner", name)
	}
	out := tensor.Named{}
	task := &env.Task.Clients[0]
	if bs, ok := plan.Clients[0].(BatchScorer); ok {
		sc, err := bs.Scorer()
		if err != nil {
			return nil, err
		}
		recs := make([]int, B)
		for k := range recs {
			recs[k] = env.TrainRecs[task.Train[k]][0]
		}
		buf := make([]float32, B*env.Prefixer.RecordLen())
		if err := env.TrainStore.GetBatch(recs, buf); err != nil {
			return nil, err
		}
		logits, err := sc.Logits(task.TrainSpace, buf, B)
		if err != nil {
			return nil, err
		}
		out["logits"] = &tensor.Tensor{Shape: []int{B, len(logits) / B}, Data: append([]float32(nil), logits...)}
	}
	items := make([]int, B)
	for k := range items {
		items[k] = k
	}
	loss, correct, err := l.Step(ctx, train.Batch{Items: items, RNG: rand.New(rand.NewPCG(uint64(seed), 0))})
	if err != nil {
		return nil, err
	}
	out["loss"] = &tensor.Tensor{Shape: []int{1}, Data: []float32{float32(loss)}}
	out["train_correct"] = &tensor.Tensor{Shape: []int{1}, Data: []float32{float32(correct)}}
	params := l.Params()
	for _, p := range params {
		out["grad."+p.Name] = &tensor.Tensor{Shape: []int{len(p.Grad)}, Data: append([]float32(nil), p.Grad...)}
	}
	if err := optim.NewSGD(opts.Momentum, opts.WD, false).Step(opts.LR, params); err != nil {
		return nil, err
	}
	for _, p := range params {
		out["step1."+p.Name] = &tensor.Tensor{Shape: []int{len(p.Value)}, Data: append([]float32(nil), p.Value...)}
	}
	// the parameters' own shapes, where the fixture gave them
	for _, p := range params {
		if src, ok := f.Params[p.Name]; ok && len(src.Data) == len(p.Value) {
			out["grad."+p.Name].Shape = append([]int(nil), src.Shape...)
			out["step1."+p.Name].Shape = append([]int(nil), src.Shape...)
		}
	}
	return out, nil
}
