package dpfpl

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// StepFromFile replays one training step in the fixture layout of
// testdata/dpfpl/step.safetensors. params holds global_ctx and local_ctx;
// batch holds "tokens" [C, Ctx], "labels" [B] (integers as float32),
// "images" or "image_features", and the step's recorded draws
// "client0.omega" [D, r], "client0.noise_u" [n, r], "client0.noise_v"
// [r, D]; meta gives n_ctx, rank, norm_thresh, noise (ε), delta, rounds,
// batch_size, lr, momentum, weight_decay and logit_scale. The result holds
// "image_features", "text_features", "logits", "loss", the factors
// "local_u_ctx", "local_v_ctx", "residual", the gradients
// "grad.<global_ctx|local_ctx|local_u_ctx|local_v_ctx>" after the privacy
// mechanism, "raw_grad" (∂loss/∂ctx), "noise_std" and "step1.<p>" (one
// step of a fresh SGD).
func StepFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	l, h, err := replay.Learner(m, params, batch, meta, false)
	if err != nil {
		return nil, err
	}
	img, nb, err := prompt.ImageFeatures(m, batch, "")
	if err != nil {
		return nil, fmt.Errorf("dpfpl: %w", err)
	}
	labels, err := prompt.Ints(batch, "labels")
	if err != nil {
		return nil, fmt.Errorf("dpfpl: %w", err)
	}
	loss, _, logits, err := l.Step(img, labels)
	if err != nil {
		return nil, err
	}
	n, r, D, C, E := l.Cfg.NCtx, l.Cfg.Rank, l.D, l.C, l.E
	out := tensor.Named{
		"loss":           prompt.Scalar(loss),
		"logits":         vec(logits, nb, C),
		"image_features": vec(img, nb, E),
		"text_features":  vec(l.txt, C, E),
		"raw_grad":       vec(l.g, n, D),
		"noise_std":      prompt.Scalar(l.Cfg.NoiseStd),
	}
	used := 0
	if err := l.Privatize(&replaySource{draws: batch, prefix: "client0.", used: &used}); err != nil {
		return nil, err
	}
	out["local_u_ctx"], out["local_v_ctx"], out["residual"] = vec(l.U, n, r), vec(l.V, r, D), vec(l.Res, n, D)
	out["grad.prompt_learner.local_u_ctx"], out["grad.prompt_learner.local_v_ctx"] = vec(l.GU, n, r), vec(l.GV, r, D)
	for name, g := range l.Grads() {
		out["grad."+name] = g.Clone()
	}
	step, err := prompt.SGDOnce(l, h)
	if err != nil {
		return nil, fmt.Errorf("dpfpl: %w", err)
	}
	maps.Copy(out, step)
	return out, nil
}

// replay rebuilds the learner of a fixture file (batch_size is the batch
// of the privacy accounting).
var replay = prompt.Replay[*Learner, Config]{Name: "dpfpl", New: New,
	Config: func(meta map[string]string) (Config, error) {
		s, err := settingsFromMeta(meta)
		if err != nil {
			return Config{}, err
		}
		B, err := prompt.MetaInt(meta, "batch_size")
		if err != nil {
			return Config{}, fmt.Errorf("dpfpl: %w", err)
		}
		return s.config(0, B), nil
	},
	Scale: func(l *Learner, s float32) { l.LogitScale = s }}

func vec(x []float32, shape ...int) *tensor.Tensor {
	return &tensor.Tensor{Shape: shape, Data: append([]float32(nil), x[:tensor.Numel(shape)]...)}
}

// Shared reports whether the server averages a parameter: only the global
// context (prompt.Learner).
func (l *Learner) Shared(name string) bool { return name == ParamGlobal }

// SettingsFrom implements parity.Settings: the settings of the
// fixture's metadata (n_ctx, rank, norm_thresh, noise = ε, delta, rounds,
// factorization: only "dpfpl", others refused)
// with its recorded draws (client<i>.omega, client<i>.noise_u,
// client<i>.noise_v, server_noise) in place of the generators'.
func (Method) SettingsFrom(f *parity.Fixture) (config.Section, error) {
	s, err := settingsFromMeta(f.Meta)
	if err != nil {
		return nil, err
	}
	s.replay = tensor.Named{}
	for _, k := range slices.Sorted(maps.Keys(f.Batch)) {
		s.replay[k] = f.Batch[k]
	}
	return s, nil
}

func settingsFromMeta(meta map[string]string) (*Settings, error) {
	s := defaultSettings()
	for k, dst := range map[string]*int{"n_ctx": &s.NCtx, "rank": &s.Rank, "rounds": &s.CalibrationRounds} {
		v, err := prompt.MetaInt(meta, k)
		if err != nil {
			return nil, fmt.Errorf("dpfpl: %w", err)
		}
		*dst = v
	}
	for k, dst := range map[string]*float64{"norm_thresh": &s.NormThresh, "noise": &s.Epsilon, "delta": &s.Delta} {
		v, err := prompt.MetaFloat(meta, k)
		if err != nil {
			return nil, fmt.Errorf("dpfpl: %w", err)
		}
		*dst = v
	}
	if f, ok := meta["factorization"]; ok {
		s.Factorization = f
	}
	if v, ok := meta["per_example_dp"]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("dpfpl: per_example_dp %q: want true or false", v)
		}
		s.PerExampleDP = b
	}
	return settings(s)
}

// Step implements parity.Stepper.
func (Method) Step(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	return StepFromFile(f.Model, f.Params, f.FloatBatch(), f.Meta)
}

// FixtureKeys implements parity.Settings: the hyper-parameters (metadata
// keys) its `pfedmma step` and `round` read; any other --set key is refused.
func (Method) FixtureKeys() []string {
	return []string{
		"batch_size", "delta", "factorization", "local_epochs", "logit_scale", "lr", "momentum", "n_ctx",
		"noise", "norm_thresh", "per_example_dp", "rank", "rounds", "weight_decay",
	}
}

var _ parity.Method = Method{}
