package prograd

import (
	"context"
	"fmt"
	"maps"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// noCSC says why csc=true is refused.
const noCSC = "ProGrad's class-specific context (the authors' CSC option) is not implemented; pfedmma learns one context shared by the classes (csc=false)"

// ConfigFromMeta reads n_ctx, T, lambda (and refuses csc true or a class
// token position other than end) from fixture metadata.
func ConfigFromMeta(meta map[string]string) (Config, error) {
	c := Config{InitStd: 0.02}
	var err error
	if err = prompt.EndOnly(meta["class_token_position"], noPosition); err != nil {
		return c, fmt.Errorf("prograd: metadata %w", err)
	}
	csc, err := prompt.MetaBool(meta, "csc", false)
	if err != nil {
		return c, fmt.Errorf("prograd: %w", err)
	}
	if csc {
		return c, fmt.Errorf("prograd: metadata csc=%q: %s", meta["csc"], noCSC)
	}
	if c.NCtx, err = prompt.MetaInt(meta, "n_ctx"); err != nil {
		return c, fmt.Errorf("prograd: %w", err)
	}
	if c.T, err = prompt.MetaFloat(meta, "T"); err != nil {
		return c, fmt.Errorf("prograd: %w", err)
	}
	if c.Lambda, err = prompt.MetaFloat(meta, "lambda"); err != nil {
		return c, fmt.Errorf("prograd: %w", err)
	}
	return c, c.Validate()
}

// FixtureKeys implements parity.Settings: the hyper-parameters ProGrad's
// `pfedmma step` and `round` read (cmd/pfedmma refuses any other --set key).
func (Method) FixtureKeys() []string {
	return []string{"T", "batch_size", "class_token_position", "csc", "lambda", "local_epochs", "lr", "momentum", "n_ctx", "weight_decay"}
}

var _ parity.Method = Method{}

// SettingsFrom implements parity.Settings (the fixture's init tensors
// replace the context init, so ctx_init is empty; the teacher's prompts are
// the fixture's "template_tokens").
func (Method) SettingsFrom(f *parity.Fixture) (config.Section, error) {
	c, err := ConfigFromMeta(f.Meta)
	if err != nil {
		return nil, err
	}
	template, err := f.IntsOf("template_tokens")
	if err != nil {
		return nil, fmt.Errorf("prograd: the teacher's hand-crafted prompts: %w", err)
	}
	return &Settings{NCtx: c.NCtx, T: c.T, Lambda: c.Lambda, InitStd: c.InitStd, TemplateRows: template}, nil
}

// Step implements parity.Stepper through the production client
// (parity.LearnerStep): "loss" (the cross entropy), "grad.prompt_learner.ctx"
// (the update direction) and "step1.…"; then, from a bare learner on the
// same inputs, what the step computes on the way: "logits",
// "image_features", "text_features", "zs_logits", "zs_text_features",
// "xe_loss", "kl_loss", "grad_xe.…", "grad_kl.…", their "cos" and
// "projected" (1 when the direction was projected).
func (m Method) Step(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	sec, err := m.SettingsFrom(f)
	if err != nil {
		return nil, err
	}
	out, err := parity.LearnerStep(ctx, m, sec, f)
	if err != nil {
		return nil, err
	}
	s, err := settings(sec)
	if err != nil {
		return nil, err
	}
	l, img, labels, err := stepLearner(f, s)
	if err != nil {
		return nil, err
	}
	_, _, logits, err := l.Step(img, labels)
	if err != nil {
		return nil, err
	}
	maps.Copy(out, l.Intermediates())
	B := len(labels)
	out["logits"] = &tensor.Tensor{Shape: []int{B, l.C}, Data: append([]float32(nil), logits...)}
	out["image_features"] = &tensor.Tensor{Shape: []int{B, l.E}, Data: img}
	return out, nil
}

// stepLearner is a bare learner of a step fixture with its parameters,
// and the batch's image features and labels.
func stepLearner(f *parity.Fixture, s *Settings) (*Learner, []float32, []int, error) {
	tokens, C, err := f.ClassTokens()
	if err != nil {
		return nil, nil, nil, err
	}
	labels, err := f.Labels(C)
	if err != nil {
		return nil, nil, nil, err
	}
	img, err := f.ImageFeatures(len(labels))
	if err != nil {
		return nil, nil, nil, err
	}
	l, err := New(f.Model, tokens, s.TemplateRows, Config{NCtx: s.NCtx, T: s.T, Lambda: s.Lambda, InitStd: s.InitStd})
	if err != nil {
		return nil, nil, nil, err
	}
	if err := prompt.Load(l.Params(), f.Params); err != nil {
		return nil, nil, nil, fmt.Errorf("prograd: %w", err)
	}
	return l, img, labels, nil
}

// SurrogateGradient implements methods.SurrogateGradient.
func (Method) SurrogateGradient() string {
	return "ProGrad's update direction is the cross entropy's gradient with its component along the zero-shot distillation gradient removed where they conflict (the authors' prograd_backward_and_update): no loss has it as its derivative; the package's tests check G_ce and G_kd against finite differences of their losses"
}

var _ methods.SurrogateGradient = Method{}
