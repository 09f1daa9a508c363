package cocoop

import (
	"context"
	"fmt"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// ConfigFromMeta reads n_ctx and init_std from fixture metadata.
func ConfigFromMeta(meta map[string]string) (Config, error) {
	c := Config{InitStd: 0.02}
	var err error
	if err = prompt.EndOnly(meta["class_token_position"], noPosition); err != nil {
		return c, fmt.Errorf("cocoop: metadata %w", err)
	}
	if c.NCtx, err = prompt.MetaInt(meta, "n_ctx"); err != nil {
		return c, fmt.Errorf("cocoop: %w", err)
	}
	return c, c.Validate()
}

// SettingsFrom implements parity.Settings (the fixture's init
// tensors replace the context init, so ctx_init is empty).
func (Method) SettingsFrom(f *parity.Fixture) (config.Section, error) {
	c, err := ConfigFromMeta(f.Meta)
	if err != nil {
		return nil, err
	}
	return &Settings{NCtx: c.NCtx, InitStd: c.InitStd}, nil
}

// Step implements parity.Stepper.
func (Method) Step(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	return StepFromFile(f.Model, f.Params, f.FloatBatch(), f.Meta)
}

// StepFromFile replays one training step in the fixture layout of
// testdata/cocoop/step.safetensors: params holds the prompt learner,
// batch "tokens", "labels" and "images" (or "image_features"); meta gives
// n_ctx, lr, momentum, weight_decay and logit_scale. The result holds
// "image_features", "meta_bias", "ctx_shifted", "text_features" [B, C, E],
// "logits", "loss", "loss_ce", "grad.<p>" and "step1.<p>".
func StepFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	return prompt.ReplayStep(replay, m, params, batch, meta, func(l *Learner, img []float32, B int, out tensor.Named) {
		for k, v := range l.Intermediates(B) {
			out[k] = v
		}
		out["image_features"] = &tensor.Tensor{Shape: []int{B, l.E}, Data: img}
	})
}

// RoundFromFile replays the round of testdata/cocoop/round.safetensors
// with prompt.Round (the fixture's own loop; parity.Round is the
// production path).
func RoundFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	return prompt.ReplayRound(replay, m, params, batch, meta)
}

// replay rebuilds the learner of a fixture file.
var replay = prompt.Replay[*Learner, Config]{Name: "cocoop", Config: ConfigFromMeta, New: New,
	Scale: func(l *Learner, s float32) { l.LogitScale = s }}

// FixtureKeys implements parity.Settings: the hyper-parameters (metadata
// keys) its `pfedmma step` and `round` read; any other --set key is refused.
func (Method) FixtureKeys() []string {
	return []string{
		"batch_size", "class_token_position", "local_epochs", "logit_scale", "lr", "momentum", "n_ctx",
		"weight_decay",
	}
}

var _ parity.Method = Method{}
