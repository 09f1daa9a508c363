package promptfl

import (
	"context"
	"fmt"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// ConfigFromMeta reads n_ctx, csc, class_token_position and prox_mu (optional) from
// fixture metadata on top of the defaults.
func ConfigFromMeta(meta map[string]string) (Config, error) {
	c := DefaultConfig()
	var err error
	if c.NCtx, err = prompt.MetaInt(meta, "n_ctx"); err != nil {
		return c, fmt.Errorf("promptfl: %w", err)
	}
	if c.ClassSpecific, err = prompt.MetaBool(meta, "csc", false); err != nil {
		return c, fmt.Errorf("promptfl: %w", err)
	}
	if v, ok := meta["class_token_position"]; ok {
		c.Position = v
	}
	if _, ok := meta["prox_mu"]; ok {
		if c.ProxMu, err = prompt.MetaFloat(meta, "prox_mu"); err != nil {
			return c, fmt.Errorf("promptfl: %w", err)
		}
	}
	return c, c.Validate()
}

// replay rebuilds the learner of a fixture file; with prox_mu the anchor
// is the file's parameters.
var replay = prompt.Replay[*Learner, Config]{Name: "promptfl", Config: ConfigFromMeta, New: New,
	Scale: func(l *Learner, s float32) { l.LogitScale = s },
	Loaded: func(l *Learner, params tensor.Named) error {
		if l.Cfg.ProxMu > 0 {
			return l.SetGlobal(params)
		}
		return nil
	}}

// StepFromFile replays one training step in the fixture layout of
// testdata/promptfl/step.safetensors. params holds "prompt_learner.ctx";
// batch holds "tokens" [C, Ctx] and "labels" [B] (integers stored as
// float32, see prompt.ReadFile) and "images" [B, 3, S, S] or
// "image_features" [B, E]; meta gives n_ctx, csc, lr, momentum,
// weight_decay, logit_scale (and prox_mu: the anchor is then params). The
// result holds "image_features", "text_features", "logits", "loss", the
// terms, "grad.<p>" and "step1.<p>" (after one step of a fresh SGD).
func StepFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	return prompt.ReplayStep(replay, m, params, batch, meta, func(l *Learner, img []float32, B int, out tensor.Named) {
		out["image_features"] = &tensor.Tensor{Shape: []int{B, l.E}, Data: img}
		out["text_features"] = &tensor.Tensor{Shape: []int{l.C, l.E}, Data: append([]float32(nil), l.txt...)}
	})
}

// RoundFromFile replays one federated round in the fixture layout of
// testdata/promptfl/round.safetensors (see prompt.Round): every client
// starts from params; the result holds "clientN.batch_losses",
// "clientN.trained.prompt_learner.ctx" and "global.prompt_learner.ctx".
func RoundFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	return prompt.ReplayRound(replay, m, params, batch, meta)
}

// SettingsFrom implements parity.Settings.
func (Method) SettingsFrom(f *parity.Fixture) (config.Section, error) {
	cfg, err := ConfigFromMeta(f.Meta)
	if err != nil {
		return nil, err
	}
	return &Settings{NCtx: cfg.NCtx, ClassSpecific: cfg.ClassSpecific, InitStd: cfg.InitStd, ProxMu: cfg.ProxMu, ClassTokenPosition: cfg.Position}, nil
}

// Step implements parity.Stepper.
func (Method) Step(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	return StepFromFile(f.Model, f.Params, f.FloatBatch(), f.Meta)
}

// FixtureKeys implements parity.Settings: the hyper-parameters (metadata
// keys) its `pfedmma step` and `round` read; any other --set key is refused.
func (Method) FixtureKeys() []string {
	return []string{
		"batch_size", "class_token_position", "csc", "local_epochs", "logit_scale", "lr", "momentum",
		"n_ctx", "prox_mu", "weight_decay",
	}
}

var _ parity.Method = Method{}
