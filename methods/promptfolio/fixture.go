package promptfolio

import (
	"context"
	"fmt"
	"slices"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// ConfigFromMeta reads n_ctx, θ ("theta", or the code's "frac") and, when
// present, init_std and num_prompt (which must be 2) from fixture metadata.
func ConfigFromMeta(meta map[string]string) (Config, error) {
	c := DefaultConfig()
	var err error
	if err = prompt.EndOnly(meta["class_token_position"], noPosition); err != nil {
		return c, fmt.Errorf("promptfolio: metadata %w", err)
	}
	if c.NCtx, err = prompt.MetaInt(meta, "n_ctx"); err != nil {
		return c, fmt.Errorf("promptfolio: %w", err)
	}
	key := "theta"
	if _, ok := meta[key]; !ok {
		key = "frac"
	}
	if c.Theta, err = prompt.MetaFloat(meta, key); err != nil {
		return c, fmt.Errorf("promptfolio: %w (give θ with --set theta=…)", err)
	}
	if _, ok := meta["init_std"]; ok {
		if c.InitStd, err = prompt.MetaFloat(meta, "init_std"); err != nil {
			return c, fmt.Errorf("promptfolio: %w", err)
		}
	}
	if _, ok := meta["num_prompt"]; ok {
		n, err := prompt.MetaInt(meta, "num_prompt")
		if err != nil {
			return c, fmt.Errorf("promptfolio: %w", err)
		}
		if n != numPrompt {
			return c, fmt.Errorf("promptfolio: metadata num_prompt %d: the method has a global and a local prompt (2); the reference code uses only the first two of more", n)
		}
	}
	return c, c.Validate()
}

// StepFromFile replays one training step in the fixture layout of
// testdata/promptfolio/step*.safetensors. params holds "prompt_learner.ctx"
// [2, n_ctx, D]; batch holds "tokens" [C, Ctx], "labels" [B] (integers as
// float32, see prompt.ReadFile) and "images" [B, 3, S, S] or
// "image_features" [B, E]; meta gives n_ctx, theta (or frac), lr, momentum,
// weight_decay and logit_scale. The result holds "image_features",
// "text_features" [2, C, E] (before normalisation), "text_features_mixed"
// [C, E], "logits", "loss", "grad.prompt_learner.ctx" and
// "step1.prompt_learner.ctx" (after one step of a fresh SGD).
func StepFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	return prompt.ReplayStep(replay, m, params, batch, meta, func(l *Learner, img []float32, B int, out tensor.Named) {
		out["image_features"] = &tensor.Tensor{Shape: []int{B, l.E}, Data: slices.Clone(img)}
		out["text_features"] = &tensor.Tensor{Shape: []int{numPrompt, l.C, l.E}, Data: slices.Clone(l.txt)}
		out["text_features_mixed"] = &tensor.Tensor{Shape: []int{l.C, l.E}, Data: slices.Clone(l.Mixed())}
	})
}

// replay rebuilds the learner of a fixture file.
var replay = prompt.Replay[*Learner, Config]{Name: "promptfolio", Config: ConfigFromMeta, New: New,
	Scale: func(l *Learner, s float32) { l.LogitScale = s }}

// SettingsFrom implements parity.Settings.
func (Method) SettingsFrom(f *parity.Fixture) (config.Section, error) {
	cfg, err := ConfigFromMeta(f.Meta)
	if err != nil {
		return nil, err
	}
	return fromConfig(cfg), nil
}

// Step implements parity.Stepper.
func (Method) Step(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	return StepFromFile(f.Model, f.Params, f.FloatBatch(), f.Meta)
}

// FixtureRound implements parity.Rounder: the plain round (parity.Round:
// the clients in federation Sites, FedAvg of prompt 0, the Coordinator)
// with each client's "client<i>.batch_losses" (before each step), then
// "client<i>.next.prompt_learner.ctx", where each client starts the next
// round: the server's global prompt installed by the client's own receive
// step into its trained parameters.
func (Method) FixtureRound(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	return client.FixtureRound(ctx, f, Method{}, func(env *methods.Env, sec config.Section) (*client.Spec, error) {
		s, err := settings(sec)
		if err != nil {
			return nil, err
		}
		return spec(env, s.config(env.Seed)), nil
	})
}

// FixtureKeys implements parity.Settings: the hyper-parameters (metadata
// keys) its `pfedmma step` and `round` read; any other --set key is refused.
func (Method) FixtureKeys() []string {
	return []string{
		"batch_size", "class_token_position", "frac", "init_std", "local_epochs", "logit_scale", "lr",
		"momentum", "n_ctx", "num_prompt", "theta", "weight_decay",
	}
}

var _ parity.Method = Method{}
