package plot

import (
	"context"
	"fmt"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// noPosition says why class_token_position other than end is refused.
const noPosition = "PLOT's code builds N·C prompts only with the class token at the end (middle and front build C prompts and fail; tools/fixtures/plot/README.md)"

// ConfigFromMeta reads n_ctx, n_prompts, eps, thresh, max_iter (init_std,
// csc, class_token_position when present) and dataset (ImageNet turns the
// global branch on, as their code does) from fixture metadata.
func ConfigFromMeta(meta map[string]string) (Config, error) {
	c := DefaultConfig()
	var err error
	for key, dst := range map[string]*int{"n_ctx": &c.NCtx, "n_prompts": &c.N, "max_iter": &c.MaxIter} {
		if *dst, err = prompt.MetaInt(meta, key); err != nil {
			return c, fmt.Errorf("plot: %w", err)
		}
	}
	for key, dst := range map[string]*float64{"eps": &c.Eps, "thresh": &c.Thresh} {
		if *dst, err = prompt.MetaFloat(meta, key); err != nil {
			return c, fmt.Errorf("plot: %w", err)
		}
	}
	if _, ok := meta["init_std"]; ok {
		if c.InitStd, err = prompt.MetaFloat(meta, "init_std"); err != nil {
			return c, fmt.Errorf("plot: %w", err)
		}
	}
	csc, err := prompt.MetaBool(meta, "csc", false)
	if err != nil {
		return c, fmt.Errorf("plot: %w", err)
	}
	if csc {
		return c, fmt.Errorf("plot: metadata csc=%q: PLOT's class-specific context fails in their code unless n_cls = N; pfedmma learns N contexts shared by the classes", meta["csc"])
	}
	if err := prompt.EndOnly(meta["class_token_position"], noPosition); err != nil {
		return c, fmt.Errorf("plot: metadata %w", err)
	}
	if c.GlobalLogit, err = prompt.MetaBool(meta, "global_logit", meta["dataset"] == "ImageNet"); err != nil {
		return c, fmt.Errorf("plot: %w", err)
	}
	return c, c.Validate()
}

// SettingsFrom implements parity.Settings.
func (Method) SettingsFrom(f *parity.Fixture) (config.Section, error) {
	cfg, err := ConfigFromMeta(f.Meta)
	if err != nil {
		return nil, err
	}
	return fromConfig(cfg), nil
}

// Step implements parity.Stepper: the step of the production client
// (parity.LearnerStep: loss, logits, grad.*, step1.*) and, from a learner
// built on the same settings, the features the reference records and the
// logits (the client is no BatchScorer):
// "image_features" [1+M, B, E] (token-major, as theirs), "text_features"
// [N·C, E], "plan" [B·C, M, N].
func (m Method) Step(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	sec, err := m.SettingsFrom(f)
	if err != nil {
		return nil, err
	}
	if err := checkLogitScale(f); err != nil {
		return nil, err
	}
	out, err := parity.LearnerStep(ctx, m, sec, f)
	if err != nil {
		return nil, err
	}
	feats, err := features(f, sec.(*Settings).config(0))
	if err != nil {
		return nil, err
	}
	for k, v := range feats { // the client's own logits, where it scores
		if out[k] == nil {
			out[k] = v
		}
	}
	return out, nil
}

// checkLogitScale refuses a fixture whose logit_scale is not the model's
// (the production client scores with the model's own).
func checkLogitScale(f *parity.Fixture) error {
	if _, ok := f.Meta["logit_scale"]; !ok {
		return nil
	}
	s, err := f.Float("logit_scale")
	if err != nil {
		return err
	}
	if float32(s) != f.Model.W.LogitScale {
		return fmt.Errorf("plot: metadata logit_scale %g is not the model's %g (the client scores with the model's)", s, f.Model.W.LogitScale)
	}
	return nil
}

// features computes the reference's recorded features of the step batch
// with a learner holding f.Params.
func features(f *parity.Fixture, cfg Config) (tensor.Named, error) {
	tokens, err := f.IntsOf("tokens")
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
	l, err := New(f.Model, tokens, cfg)
	if err != nil {
		return nil, err
	}
	if err := prompt.Load(l.Params(), f.Params); err != nil {
		return nil, fmt.Errorf("plot: %w", err)
	}
	B := len(labels)
	img := f.Model.EncodeImageTokens(images.Data, B)
	logits, err := l.Logits(img, B)
	if err != nil {
		return nil, err
	}
	T := len(img) / (B * l.E)
	tm := make([]float32, len(img)) // [B, T, E] → [T, B, E]
	for b := 0; b < B; b++ {
		for t := 0; t < T; t++ {
			copy(tm[(t*B+b)*l.E:(t*B+b+1)*l.E], img[(b*T+t)*l.E:(b*T+t+1)*l.E])
		}
	}
	return tensor.Named{
		"image_features": {Shape: []int{T, B, l.E}, Data: tm},
		"text_features":  {Shape: []int{cfg.N * l.C, l.E}, Data: append([]float32(nil), l.TextFeatures()...)},
		"logits":         {Shape: []int{B, l.C}, Data: append([]float32(nil), logits...)},
		"plan":           {Shape: []int{B * l.C, T - 1, cfg.N}, Data: append([]float32(nil), l.Plan()...)},
	}, nil
}

// FixtureRound implements parity.Rounder: the plain round through the
// production client and federation.Coordinator (client.FixtureRound), with
// each client's batch losses.
func (m Method) FixtureRound(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	if err := checkLogitScale(f); err != nil {
		return nil, err
	}
	return client.FixtureRound(ctx, f, m, spec)
}

// SurrogateGradient implements methods.SurrogateGradient: as the authors'
// code, the transport plan is computed without gradient (a constant of the
// backward pass), so the prompts' gradient is not that of the loss; the
// gradient with the plan held is checked by TestStepGradient.
func (Method) SurrogateGradient() string {
	return "the optimal-transport plan is held constant in the backward pass"
}

// FixtureKeys implements parity.Settings: the hyper-parameters (metadata
// keys) its `pfedmma step` and `round` read; any other --set key is refused.
func (Method) FixtureKeys() []string {
	return []string{
		"batch_size", "class_token_position", "csc", "dataset", "eps", "global_logit", "init_std", "local_epochs",
		"logit_scale", "lr", "max_iter", "momentum", "n_ctx", "n_prompts", "thresh", "weight_decay",
	}
}

var _ parity.Method = Method{}
