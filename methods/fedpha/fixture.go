package fedpha

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

// ConfigFromMeta reads n_ctx and ratio, and when present alpha,
// lambda_pull, lambda_push, init_std and num_prompt (which must be 1), from
// fixture metadata.
func ConfigFromMeta(meta map[string]string) (Config, error) {
	c := DefaultConfig()
	var err error
	if err = prompt.EndOnly(meta["class_token_position"], noPosition); err != nil {
		return c, fmt.Errorf("fedpha: metadata %w", err)
	}
	if c.NCtx, err = prompt.MetaInt(meta, "n_ctx"); err != nil {
		return c, fmt.Errorf("fedpha: %w", err)
	}
	if c.Ratio, err = prompt.MetaFloat(meta, "ratio"); err != nil {
		return c, fmt.Errorf("fedpha: %w", err)
	}
	for key, dst := range map[string]*float64{"alpha": &c.Alpha, "lambda_pull": &c.LambdaPull, "lambda_push": &c.LambdaPush, "init_std": &c.InitStd} {
		if _, ok := meta[key]; !ok {
			continue
		}
		if *dst, err = prompt.MetaFloat(meta, key); err != nil {
			return c, fmt.Errorf("fedpha: %w", err)
		}
	}
	if _, ok := meta["num_prompt"]; ok {
		n, err := prompt.MetaInt(meta, "num_prompt")
		if err != nil {
			return c, fmt.Errorf("fedpha: %w", err)
		}
		if n != 1 {
			return c, fmt.Errorf("fedpha: metadata num_prompt %d: only one prompt per context (the reference's N = 1) is supported", n)
		}
	}
	return c, c.Validate()
}

// StepFromFile replays one training step in the fixture layout of
// testdata/fedpha/step*.safetensors. params holds both contexts
// [1, n_ctx, D]; batch holds "tokens" [C, Ctx], "labels" [B] (integers as
// float32, see prompt.ReadFile) and "images" [B, 3, S, S] or
// "image_features" [B, E]; meta gives the settings (ConfigFromMeta) and lr,
// momentum, weight_decay, logit_scale. The result holds the features
// ("image_features", "text_features" f_L, "text_features_global",
// "text_features_projected", raw), "global_singular_values", "projector",
// "ctx_local_projected", "logits", "logits_global", "text_distance", the
// loss and its terms, and "grad." / "step1." of both contexts (after one
// step of a fresh SGD).
func StepFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	return prompt.ReplayStep(replay, m, params, batch, meta, func(l *Learner, img []float32, B int, out tensor.Named) {
		C, E, D, n := l.C, l.E, l.D, l.Cfg.NCtx
		sv := l.proj.SingularValues()
		s32 := make([]float32, len(sv))
		for i, v := range sv {
			s32[i] = float32(v)
		}
		out["image_features"] = &tensor.Tensor{Shape: []int{B, E}, Data: slices.Clone(img)}
		out["text_features"] = &tensor.Tensor{Shape: []int{C, E}, Data: slices.Clone(l.txt[:C*E])}
		out["text_features_global"] = &tensor.Tensor{Shape: []int{C, E}, Data: slices.Clone(l.txt[C*E : 2*C*E])}
		out["text_features_projected"] = &tensor.Tensor{Shape: []int{C, E}, Data: slices.Clone(l.txt[2*C*E : 3*C*E])}
		out["global_singular_values"] = &tensor.Tensor{Shape: []int{len(s32)}, Data: s32}
		out["projector"] = &tensor.Tensor{Shape: []int{D, D}, Data: slices.Clone(l.proj.p)}
		out["ctx_local_projected"] = &tensor.Tensor{Shape: []int{1, n, D}, Data: slices.Clone(l.projected)}
		out["logits_global"] = &tensor.Tensor{Shape: []int{B, C}, Data: slices.Clone(l.logitsG)}
		out["text_distance"] = &tensor.Tensor{Shape: []int{C}, Data: slices.Clone(l.dist)}
	})
}

// replay rebuilds the learner of a fixture file.
var replay = prompt.Replay[*Learner, Config]{Name: "fedpha", Config: ConfigFromMeta, New: New,
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
// the clients in federation Sites, FedAvg of the global context, the
// Coordinator) with each client's "client<i>.batch_losses" (before each
// step), then "client<i>.next.<param>", where each client starts
// the next round: the server's global context installed by the client's
// own receive step, its local context as trained.
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
		"alpha", "batch_size", "class_token_position", "init_std", "lambda_pull", "lambda_push",
		"local_epochs", "logit_scale", "lr", "momentum", "n_ctx", "num_prompt", "ratio", "weight_decay",
	}
}

var _ parity.Method = Method{}
