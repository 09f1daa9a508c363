package prograd

import (
	"context"
	"fmt"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/fixture"
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

// FixtureKeys implements fixture.Settings: the hyper-parameters ProGrad's
// `pfedmma step` and `round` read (cmd/pfedmma refuses any other --set key).
func (Method) FixtureKeys() []string {
	return []string{"T", "batch_size", "class_token_position", "csc", "lambda", "local_epochs", "lr", "momentum", "n_ctx", "weight_decay"}
}

var _ fixture.Method = Method{}

// SettingsFrom implements fixture.Settings (the fixture's init tensors
// replace the context init, so ctx_init is empty; the teacher's prompts are
// the fixture's "template_tokens").
func (Method) SettingsFrom(f *fixture.Fixture) (config.Section, error) {
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

// Step implements fixture.Stepper through the production client
// (fixture.LearnerStep): "loss" (the cross entropy), "logits",
// "grad.prompt_learner.ctx" (the update direction) and "step1.…".
func (m Method) Step(ctx context.Context, f *fixture.Fixture) (tensor.Named, error) {
	sec, err := m.SettingsFrom(f)
	if err != nil {
		return nil, err
	}
	return fixture.LearnerStep(ctx, m, sec, f)
}

// SurrogateGradient implements methods.SurrogateGradient.
func (Method) SurrogateGradient() string {
	return "ProGrad's update direction is the cross entropy's gradient with its component along the zero-shot distillation gradient removed where they conflict (the authors' prograd_backward_and_update): no loss has it as its derivative; the package's tests check G_ce and G_kd against finite differences of their losses"
}

var _ methods.SurrogateGradient = Method{}
