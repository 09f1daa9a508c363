package maple

import (
	"context"
	"fmt"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// ConfigFromMeta reads n_ctx and prompt_depth (and init_std, seed when
// present) from a fixture's metadata.
func ConfigFromMeta(meta map[string]string, layers int) (Config, error) {
	c := DefaultConfig()
	var err error
	if c.NCtx, err = prompt.MetaInt(meta, "n_ctx"); err != nil {
		return c, fmt.Errorf("maple: %w", err)
	}
	if c.Depth, err = prompt.MetaInt(meta, "prompt_depth"); err != nil {
		return c, fmt.Errorf("maple: %w", err)
	}
	if _, ok := meta["init_std"]; ok {
		if c.InitStd, err = prompt.MetaFloat(meta, "init_std"); err != nil {
			return c, fmt.Errorf("maple: %w", err)
		}
	}
	return c, c.Validate(layers)
}

// replay rebuilds the learner of a fixture file on m (whose depth bounds
// prompt_depth).
func replay(m *clip.Model) prompt.Replay[*Learner, Config] {
	wc := m.W.Config
	return prompt.Replay[*Learner, Config]{Name: "maple", New: New,
		Config: func(meta map[string]string) (Config, error) {
			return ConfigFromMeta(meta, min(wc.Vision.Layers, wc.Text.Layers))
		},
		Scale: func(l *Learner, s float32) { l.LogitScale = s }}
}

// StepFromFile replays one training step in the layout of
// testdata/maple/step.safetensors: params holds the prompt learner's
// tensors; batch "tokens" [C, Ctx], "labels" [B] and "images"
// [B, 3, S, S]; meta n_ctx, prompt_depth, lr, momentum, weight_decay,
// logit_scale. The result holds "image_features", "text_features",
// "visual_prompt.k", "logits", "loss", "grad.<p>" and "step1.<p>" (one step
// of a fresh SGD).
func StepFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	l, h, err := replay(m).Learner(m, params, batch, meta, false)
	if err != nil {
		return nil, err
	}
	batch, err = prompt.ImagePrefixes(m, batch, "")
	if err != nil {
		return nil, fmt.Errorf("maple: %w", err)
	}
	labels, err := prompt.Ints(batch, "labels")
	if err != nil {
		return nil, fmt.Errorf("maple: %w", err)
	}
	B := len(labels)
	rec := batch["image_features"]
	if rec.Shape[0] != B {
		return nil, fmt.Errorf("maple: %d labels for %d images", B, rec.Shape[0])
	}
	out := tensor.Named{}
	for k, v := range l.Couple() {
		out[fmt.Sprintf("visual_prompt.%d", k)] = &tensor.Tensor{Shape: []int{l.Cfg.NCtx, l.Dv}, Data: append([]float32(nil), v...)}
	}
	step, err := prompt.StepOnce(l, rec.Data, labels, h)
	if err != nil {
		return nil, fmt.Errorf("maple: %w", err)
	}
	for k, v := range step {
		out[k] = v
	}
	// the features of the step's forward (before the SGD step)
	out["image_features"] = &tensor.Tensor{Shape: []int{B, l.E}, Data: append([]float32(nil), l.imf...)}
	out["text_features"] = &tensor.Tensor{Shape: []int{l.C, l.E}, Data: append([]float32(nil), l.tf...)}
	return out, nil
}

// RoundFromFile replays one federated round in the layout of
// testdata/maple/round.safetensors (see prompt.Round): every client starts
// from params; the result holds "clientN.batch_losses",
// "clientN.trained.<p>" and "global.<p>" for every tensor (all are shared).
func RoundFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	l, h, err := replay(m).Learner(m, params, batch, meta, true)
	if err != nil {
		return nil, err
	}
	for k := range h.ClientSizes {
		if batch, err = prompt.ImagePrefixes(m, batch, fmt.Sprintf("client%d.", k)); err != nil {
			return nil, fmt.Errorf("maple: %w", err)
		}
	}
	out, err := prompt.Round(m, l, params, batch, h)
	if err != nil {
		return nil, fmt.Errorf("maple: %w", err)
	}
	return out, nil
}

// SettingsFrom implements parity.Settings: n_ctx and prompt_depth
// (and init_std) from the metadata.
func (Method) SettingsFrom(f *parity.Fixture) (config.Section, error) {
	wc := f.Model.W.Config
	cfg, err := ConfigFromMeta(f.Meta, min(wc.Vision.Layers, wc.Text.Layers))
	if err != nil {
		return nil, err
	}
	return &Settings{NCtx: cfg.NCtx, PromptDepth: cfg.Depth, InitStd: cfg.InitStd}, nil // the fixtures' "X X" prompts
}

// Step implements parity.Stepper: the layout of testdata/maple/step.safetensors.
func (Method) Step(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	return StepFromFile(f.Model, f.Params, f.FloatBatch(), f.Meta)
}

// FixtureKeys implements parity.Settings: the hyper-parameters (metadata
// keys) its `pfedmma step` and `round` read; any other --set key is refused.
func (Method) FixtureKeys() []string {
	return []string{
		"batch_size", "init_std", "local_epochs", "logit_scale", "lr", "momentum", "n_ctx", "prompt_depth",
		"weight_decay",
	}
}

var _ parity.Method = Method{}
