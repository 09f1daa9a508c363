package kgcoop

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// ConfigFromMeta reads n_ctx and w from fixture metadata.
func ConfigFromMeta(meta map[string]string) (Config, error) {
	c := Config{InitStd: 0.02}
	var err error
	if err = prompt.EndOnly(meta["class_token_position"], noPosition); err != nil {
		return c, fmt.Errorf("kgcoop: metadata %w", err)
	}
	if v, ok := meta["csc"]; ok {
		csc, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return c, fmt.Errorf("kgcoop: metadata csc=%q: not a boolean", v)
		}
		if csc {
			return c, fmt.Errorf("kgcoop: metadata csc=%q: %s", v, noCSC)
		}
	}
	if c.NCtx, err = prompt.MetaInt(meta, "n_ctx"); err != nil {
		return c, fmt.Errorf("kgcoop: %w", err)
	}
	if c.W, err = prompt.MetaFloat(meta, "w"); err != nil {
		return c, fmt.Errorf("kgcoop: %w", err)
	}
	return c, c.Validate()
}

// noCSC says why csc=true is refused.
const noCSC = "KgCoOp's class-specific context (one context per class, the authors' CSC option) is not implemented; pfedmma learns one context shared by the classes (csc=false)"

// FixtureKeys implements parity.Settings: the hyper-parameters KgCoOp's
// `pfedmma step` and `round` read (cmd/pfedmma refuses any other --set key).
func (Method) FixtureKeys() []string {
	return []string{"batch_size", "class_token_position", "csc", "local_epochs", "logit_scale", "lr", "momentum", "n_ctx", "w", "weight_decay"}
}

var _ parity.Method = Method{}

// SettingsFrom implements parity.Settings (the fixture's init
// tensors replace the context init, so ctx_init is empty; the hand-crafted
// prompts are the fixture's "template_tokens").
func (Method) SettingsFrom(f *parity.Fixture) (config.Section, error) {
	c, err := ConfigFromMeta(f.Meta)
	if err != nil {
		return nil, err
	}
	template, err := f.IntsOf("template_tokens")
	if err != nil {
		return nil, fmt.Errorf("kgcoop: the hand-crafted prompts: %w", err)
	}
	return &Settings{NCtx: c.NCtx, W: c.W, InitStd: c.InitStd, TemplateRows: template}, nil
}

// Step implements parity.Stepper.
func (Method) Step(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	return StepFromFile(f.Model, f.Params, f.FloatBatch(), f.Meta)
}

// StepFromFile replays one training step in the fixture layout of
// testdata/kgcoop/step.safetensors: params holds the context, batch
// "tokens", "template_tokens" (the hand-crafted prompts), "labels" and
// "images" (or "image_features"); meta gives n_ctx, w, lr, momentum,
// weight_decay and logit_scale. The result holds "image_features",
// "text_features", "template_features" (normalised), "cos", "score",
// "logits", "loss", "loss_ce", "loss_kg", "grad.<p>" and "step1.<p>".
func StepFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	return prompt.ReplayStep(replay(batch), m, params, batch, meta, func(l *Learner, img []float32, B int, out tensor.Named) {
		for k, v := range l.Intermediates() {
			out[k] = v
		}
		out["image_features"] = &tensor.Tensor{Shape: []int{B, l.E}, Data: img}
	})
}

// RoundFromFile replays the round of testdata/kgcoop/round.safetensors
// with prompt.Round (the fixture's own loop; parity.Round is the
// production path).
func RoundFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	return prompt.ReplayRound(replay(batch), m, params, batch, meta)
}

// replay rebuilds the learner of a fixture file.
func replay(batch tensor.Named) prompt.Replay[*Learner, Config] {
	return prompt.Replay[*Learner, Config]{Name: "kgcoop", Config: ConfigFromMeta,
		New: func(m *clip.Model, tokens []int, cfg Config) (*Learner, error) {
			template, err := prompt.Ints(batch, "template_tokens")
			if err != nil {
				return nil, fmt.Errorf("kgcoop: %w", err)
			}
			return New(m, tokens, template, cfg)
		},
		Scale: func(l *Learner, s float32) { l.LogitScale = s }}
}
