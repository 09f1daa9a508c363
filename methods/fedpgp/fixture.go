package fedpgp

import (
	"context"
	"fmt"
	"maps"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// ConfigFromMeta reads n_ctx, bottleneck, num_prompt, mu, temp and
// class_token_position (optional, "end") from fixture metadata.
func ConfigFromMeta(meta map[string]string) (Config, error) {
	c := DefaultConfig()
	ints := map[string]*int{"n_ctx": &c.NCtx, "bottleneck": &c.Bottleneck, "num_prompt": &c.NumPrompt}
	for k, dst := range ints {
		v, err := prompt.MetaInt(meta, k)
		if err != nil {
			return c, fmt.Errorf("fedpgp: %w", err)
		}
		*dst = v
	}
	for k, dst := range map[string]*float64{"mu": &c.Mu, "temp": &c.Temp} {
		v, err := prompt.MetaFloat(meta, k)
		if err != nil {
			return c, fmt.Errorf("fedpgp: %w", err)
		}
		*dst = v
	}
	var err error
	if c.Position, err = prompt.MetaPosition(meta); err != nil {
		return c, fmt.Errorf("fedpgp: %w", err)
	}
	return c, c.Validate()
}

// replay rebuilds the learner of a fixture file.
var replay = prompt.Replay[*Learner, Config]{Name: "fedpgp", Config: ConfigFromMeta, New: New,
	Scale: func(l *Learner, s float32) { l.LogitScale = s }}

// StepFromFile replays one training step in the fixture layout of
// testdata/fedpgp/step.safetensors. params holds U, V and sigma; batch holds
// "tokens" [C, Ctx], "labels" [B] (integers as float32, see
// prompt.ReadFile) and "images" or "image_features"; meta gives n_ctx,
// bottleneck, num_prompt, mu, temp, lr, momentum, weight_decay and
// logit_scale. The result holds "image_features", "text_features" (f_P),
// "text_features_sigma" (f_G), "text_features_UV", "text_features_0",
// "cos_pos" and "cos_neg" [N·C], "logits", "loss", "loss_ce", "loss_con",
// "grad.<p>" and "step1.<p>" (one step of a fresh SGD).
func StepFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	l, h, err := replay.Learner(m, params, batch, meta, false)
	if err != nil {
		return nil, err
	}
	img, B, err := prompt.ImageFeatures(m, batch, "")
	if err != nil {
		return nil, fmt.Errorf("fedpgp: %w", err)
	}
	labels, err := prompt.Ints(batch, "labels")
	if err != nil {
		return nil, fmt.Errorf("fedpgp: %w", err)
	}
	R, E := l.R, l.E
	// f_UV: computed by the reference at every step but used by no loss term.
	N, n, D := l.Cfg.NumPrompt, l.Cfg.NCtx, l.D
	l.contexts()
	uvCtx := append(append([]float32(nil), l.uv...), l.uv...)
	fUV, err := l.enc.Forward(uvCtx[:2*N*n*D], 2*N, false)
	if err != nil {
		return nil, fmt.Errorf("fedpgp: %w", err)
	}
	out := tensor.Named{"text_features_UV": vec(fUV[:R*E], R, E)}

	loss, terms, logits, err := l.Step(img, labels)
	if err != nil {
		return nil, err
	}
	out["loss"] = prompt.Scalar(loss)
	out["loss_ce"], out["loss_con"] = prompt.Scalar(terms["loss_ce"]), prompt.Scalar(terms["loss_con"])
	out["logits"] = vec(logits, B, len(logits)/B)
	out["image_features"] = vec(img, B, E)
	out["text_features"] = vec(l.fP, R, E)
	out["text_features_sigma"] = vec(l.fG, R, E)
	out["text_features_0"] = vec(l.f0, R, E)
	out["cos_pos"], out["cos_neg"] = vec(l.pos, R), vec(l.neg, R)
	for name, g := range l.Grads() {
		out["grad."+name] = g.Clone()
	}
	step, err := prompt.SGDOnce(l, h)
	if err != nil {
		return nil, fmt.Errorf("fedpgp: %w", err)
	}
	maps.Copy(out, step)
	return out, nil
}

func vec(x []float32, shape ...int) *tensor.Tensor {
	return &tensor.Tensor{Shape: shape, Data: append([]float32(nil), x[:tensor.Numel(shape)]...)}
}

// RoundFromFile replays one federated round in the fixture layout of
// testdata/fedpgp/round.safetensors (see prompt.Round): every client starts
// from params; the result holds "clientN.batch_losses",
// "clientN.trained.<p>" for U, V and sigma, and "global.prompt_learner.sigma"
// (only sigma is averaged).
func RoundFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	return prompt.ReplayRound(replay, m, params, batch, meta)
}

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

// FixtureKeys implements parity.Settings: the hyper-parameters (metadata
// keys) its `pfedmma step` and `round` read; any other --set key is refused.
func (Method) FixtureKeys() []string {
	return []string{
		"batch_size", "bottleneck", "class_token_position", "local_epochs", "logit_scale", "lr",
		"momentum", "mu", "n_ctx", "num_prompt", "temp", "weight_decay",
	}
}

var _ parity.Method = Method{}
