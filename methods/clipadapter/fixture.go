package clipadapter

// The reference-fixture contract (`pfedmma step` / `pfedmma round`, README
// "The reference-fixture contract") for CLIP-Adapter. The reference
// fixtures of testdata/clip_adapter (the authors' code) are checked through
// the production client in external_test.go; this file's step is the
// `pfedmma step` replay (the conformance step contract runs it on them).

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

// SettingsFrom implements parity.Settings: the reduction from the
// shape of adapter.fc.0.weight [d/reduction, d] (a metadata reduction must
// agree), the residual ratio α from ratio (default 0.2, CLIP-Adapter's).
// The logits use the model's logit_scale; a metadata logit_scale that
// differs from it is an error (the method has no setting for it).
func (Method) SettingsFrom(f *parity.Fixture) (config.Section, error) {
	s := Method{}.DefaultConfig().(*Settings)
	d := f.Model.W.Config.EmbedDim
	w1, ok := f.Params[ParamW1]
	if !ok || len(w1.Shape) != 2 || w1.Shape[1] != d || w1.Shape[0] < 1 || d%w1.Shape[0] != 0 {
		return nil, fmt.Errorf("clip_adapter: parameters lack %q [d/reduction, %d]", ParamW1, d)
	}
	s.Reduction = d / w1.Shape[0]
	if _, ok := f.Meta["reduction"]; ok {
		r, err := f.Float("reduction")
		if err != nil {
			return nil, fmt.Errorf("clip_adapter: %w", err)
		}
		if int(r) != s.Reduction {
			return nil, fmt.Errorf("clip_adapter: metadata reduction %v, but parameter %q has shape %v (reduction %d)", r, ParamW1, w1.Shape, s.Reduction)
		}
	}
	var err error
	if s.Ratio, err = f.FloatOr("ratio", s.Ratio); err != nil {
		return nil, fmt.Errorf("clip_adapter: %w", err)
	}
	if !(s.Ratio >= 0 && s.Ratio <= 1) {
		return nil, fmt.Errorf("clip_adapter: metadata ratio %v outside [0, 1]", s.Ratio)
	}
	if _, ok := f.Meta["logit_scale"]; ok {
		ls, err := f.Float("logit_scale")
		if err != nil {
			return nil, fmt.Errorf("clip_adapter: %w", err)
		}
		if m := float64(f.Model.W.LogitScale); math.Abs(ls-m) > 1e-6*(1+math.Abs(m)) {
			return nil, fmt.Errorf("clip_adapter: metadata logit_scale %v differs from the model's %v (the method scores with the model's)", ls, m)
		}
	}
	return s, nil
}

// Step implements parity.Stepper: one CLIP-Adapter step on the fixture's
// images. params holds adapter.fc.0.weight [k, d] and adapter.fc.2.weight
// [d, k]; the batch images [B, 3, S, S] (or image_features [B, d]),
// labels [B] and tokens [C, ctx] (the class prompts, encoded by the frozen
// text tower). The result holds image_features, adapted_features (f'
// [B, d]), text_features [C, d], logits [B, C], loss, grad.<p> and
// step1.<p> after one SGD step (lr, momentum, weight_decay of the
// metadata) from a fresh optimizer.
func (Method) Step(_ context.Context, f *parity.Fixture) (tensor.Named, error) {
	out, _, err := step(f)
	return out, err
}

// step is Step, also returning the loss in float64.
func step(f *parity.Fixture) (tensor.Named, float64, error) {
	sec, err := Method{}.SettingsFrom(f)
	if err != nil {
		return nil, 0, err
	}
	s := sec.(*Settings)
	model := f.Model
	d := model.W.Config.EmbedDim
	p := tensor.Named{}
	shapes := s.Shapes(d)
	for _, name := range []string{ParamW1, ParamW2} {
		t, ok := f.Params[name]
		if !ok || !tensor.SameShape(t.Shape, shapes[name]) {
			return nil, 0, fmt.Errorf("clip_adapter: parameters lack %q of shape %v", name, shapes[name])
		}
		p[name] = t.Clone()
	}
	tokens, C, err := f.ClassTokens()
	if err != nil {
		return nil, 0, fmt.Errorf("clip_adapter: %w", err)
	}
	labels, err := f.Labels(C)
	if err != nil {
		return nil, 0, fmt.Errorf("clip_adapter: %w", err)
	}
	B := len(labels)
	methods.DetachAll(model)
	img, err := f.ImageFeatures(B)
	if err != nil {
		return nil, 0, fmt.Errorf("clip_adapter: %w", err)
	}
	txt, err := model.EncodeText(tokens, C)
	if err != nil {
		return nil, 0, fmt.Errorf("clip_adapter: text features: %w", err)
	}
	w := &Model{Adapter: Adapter{Alpha: float32(s.Ratio)}, D: d, K: shapes[ParamW1][0],
		Scale: model.W.LogitScale, Grads: tensor.Named{}}
	for name, t := range p {
		w.Grads[name] = tensor.New(t.Shape...)
	}
	loss, _ := w.Step(p, img, labels, txt)
	out := tensor.Named{
		"image_features": {Shape: []int{B, d}, Data: img},
		"text_features":  {Shape: []int{C, d}, Data: txt},
		"loss":           {Shape: []int{1}, Data: []float32{float32(loss)}},
	}
	var ps []optim.Param
	for _, n := range []string{ParamW1, ParamW2} {
		out["grad."+n] = w.Grads[n].Clone()
		ps = append(ps, optim.Param{Name: n, Value: p[n].Data, Grad: w.Grads[n].Data})
	}
	// the logits and f' of the step (recomputed: the same arithmetic)
	out["logits"] = &tensor.Tensor{Shape: []int{B, C}, Data: slices.Clone(w.Logits(p, img, B, txt))}
	out["adapted_features"] = &tensor.Tensor{Shape: []int{B, d}, Data: slices.Clone(w.fp[:B*d])}
	opts, err := f.TrainOptions()
	if err != nil {
		return nil, 0, fmt.Errorf("clip_adapter: %w", err)
	}
	opt, err := opts.NewOptimizer()
	if err != nil {
		return nil, 0, err
	}
	if err := opt.Step(opts.LR, ps); err != nil {
		return nil, 0, fmt.Errorf("clip_adapter: %w", err)
	}
	for _, n := range []string{ParamW1, ParamW2} {
		out["step1."+n] = p[n]
	}
	return out, loss, nil
}

// FixtureRound implements parity.Rounder: the plain round of
// parity.RunRound (the production Plan in federation Sites, FedAvg,
// the Coordinator), reporting as client<i>.trained.<p> the adapter each
// client holds after its local training — the production Plan.Site gives
// what the site keeps, which after the round's evaluation is the server's
// average it is scored with.
func (Method) FixtureRound(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	return parity.PlainRound(ctx, f, Method{}, parity.OwnSites(Method{}, func(c *client.Client) tensor.Named { return c.P }))
}

// FixtureKeys implements parity.Settings: the hyper-parameters (metadata
// keys) its `pfedmma step` and `round` read; any other --set key is refused.
func (Method) FixtureKeys() []string {
	return []string{
		"batch_size", "local_epochs", "logit_scale", "lr", "momentum", "ratio", "reduction",
		"weight_decay",
	}
}

var _ parity.Method = Method{}
