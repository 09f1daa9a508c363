package fedotp

import (
	"context"
	"fmt"
	"slices"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// ConfigFromMeta reads n_ctx, num_prompt, avg_prompt, ot, eps, thresh,
// max_iter and top_percent (init_std and class_token_position when present)
// from fixture metadata.
func ConfigFromMeta(meta map[string]string) (Config, error) {
	c := DefaultConfig()
	var err error
	for key, dst := range map[string]*int{"n_ctx": &c.NCtx, "num_prompt": &c.NumPrompt, "avg_prompt": &c.AvgPrompt, "max_iter": &c.OT.MaxIter} {
		if *dst, err = prompt.MetaInt(meta, key); err != nil {
			return c, fmt.Errorf("fedotp: %w", err)
		}
	}
	for key, dst := range map[string]*float64{"eps": &c.OT.Eps, "thresh": &c.OT.Thresh, "top_percent": &c.OT.TopPercent} {
		if *dst, err = prompt.MetaFloat(meta, key); err != nil {
			return c, fmt.Errorf("fedotp: %w", err)
		}
	}
	var ok bool
	if c.OT.Method, ok = meta["ot"]; !ok {
		return c, fmt.Errorf("fedotp: metadata %q is missing", "ot")
	}
	if _, ok := meta["init_std"]; ok {
		if c.InitStd, err = prompt.MetaFloat(meta, "init_std"); err != nil {
			return c, fmt.Errorf("fedotp: %w", err)
		}
	}
	if c.Position, err = prompt.MetaPosition(meta); err != nil {
		return c, fmt.Errorf("fedotp: %w", err)
	}
	return c, c.Validate()
}

// replay rebuilds the learner of a fixture file.
var replay = prompt.Replay[*Learner, Config]{Name: "fedotp", Config: ConfigFromMeta, New: New,
	Scale: func(l *Learner, s float32) { l.LogitScale = s }}

// ImageTokens returns a batch's every-token image features [B, T, E]: the
// tensor prefix+"image_features" when it is 3-D, else the frozen image
// encoder of m on prefix+"images" [B, 3, S, S].
func ImageTokens(m *clip.Model, batch tensor.Named, prefix string) ([]float32, []int, error) {
	if t, ok := batch[prefix+"image_features"]; ok && len(t.Shape) == 3 {
		return t.Data, t.Shape, nil
	}
	t, ok := batch[prefix+"images"]
	if !ok {
		return nil, nil, fmt.Errorf("fedotp: tensor %q is missing", prefix+"images")
	}
	S := m.W.Config.Vision.ImageSize
	if len(t.Shape) != 4 || t.Shape[1] != 3 || t.Shape[2] != S || t.Shape[3] != S {
		return nil, nil, fmt.Errorf("fedotp: tensor %q: shape %v, want [B, 3, %d, %d]", prefix+"images", t.Shape, S, S)
	}
	B := t.Shape[0]
	return m.EncodeImageTokens(t.Data, B), []int{B, m.W.Config.Vision.FeatureTokens(), m.W.Config.EmbedDim}, nil
}

// StepFromFile replays one training step in the fixture layout of
// testdata/fedotp/step*.safetensors. params holds "prompt_learner.ctx"
// [N, n_ctx, D]; batch holds "tokens" [C, Ctx], "labels" [B] (integers as
// float32, see prompt.ReadFile) and "images" [B, 3, S, S] or every-token
// "image_features" [B, T, E]; meta gives the settings (ConfigFromMeta) and
// lr, momentum, weight_decay, logit_scale. The result holds
// "image_features" [B, T, E], "text_features" [N, C, E], "plan"
// [B·C, M, N], "logits", "loss", "grad.prompt_learner.ctx" and
// "step1.prompt_learner.ctx" (after one step of a fresh SGD).
func StepFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	l, h, err := replay.Learner(m, params, batch, meta, false)
	if err != nil {
		return nil, err
	}
	img, shape, err := ImageTokens(m, batch, "")
	if err != nil {
		return nil, err
	}
	labels, err := prompt.Ints(batch, "labels")
	if err != nil {
		return nil, fmt.Errorf("fedotp: %w", err)
	}
	if len(labels) != shape[0] {
		return nil, fmt.Errorf("fedotp: %d labels for %d images", len(labels), shape[0])
	}
	loss, logits, err := l.Step(img, labels)
	if err != nil {
		return nil, err
	}
	B, T, N := shape[0], shape[1], l.Cfg.NumPrompt
	out := tensor.Named{
		"image_features":   {Shape: slices.Clone(shape), Data: slices.Clone(img)},
		"text_features":    {Shape: []int{N, l.C, l.E}, Data: slices.Clone(l.txt)},
		"plan":             {Shape: []int{B * l.C, T - 1, N}, Data: slices.Clone(l.Plan())},
		"logits":           {Shape: []int{B, l.C}, Data: slices.Clone(logits)},
		"loss":             prompt.Scalar(loss),
		"grad." + ParamCtx: l.grad.Clone(),
	}
	if err := optim.NewSGD(h.Momentum, h.WeightDecay, false).Step(h.LR, prompt.OptimParams(l.Params(), l.Grads())); err != nil {
		return nil, fmt.Errorf("fedotp: %w", err)
	}
	out["step1."+ParamCtx] = l.ctx.Clone()
	return out, nil
}

// RoundFromFile replays one federated round in the fixture layout of
// testdata/fedotp/round.safetensors: every client k starts from params,
// trains local_epochs epochs over "clientK.images" (or every-token
// "clientK.image_features") and "clientK.labels" in stored order, batch
// batch_size, with a fresh SGD. The result holds "clientK.batch_losses",
// "clientK.trained.prompt_learner.ctx", "global.prompt_learner.ctx" (the
// first avg_prompt prompts averaged with weights n_k / Σ n, client_sizes)
// and "clientK.next.prompt_learner.ctx" (the global prompts followed by the
// client's own local prompts: where it starts the next round).
func RoundFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	l, h, err := replay.Learner(m, params, batch, meta, true)
	if err != nil {
		return nil, err
	}
	var total float64
	for _, n := range h.ClientSizes {
		total += float64(n)
	}
	out := tensor.Named{}
	var global tensor.Named
	trained := make([]tensor.Named, len(h.ClientSizes))
	for k, n := range h.ClientSizes {
		pre := fmt.Sprintf("client%d.", k)
		img, shape, err := ImageTokens(m, batch, pre)
		if err != nil {
			return nil, err
		}
		labels, err := prompt.Ints(batch, pre+"labels")
		if err != nil {
			return nil, fmt.Errorf("fedotp: %w", err)
		}
		B := shape[0]
		if len(labels) != B {
			return nil, fmt.Errorf("fedotp: %slabels: %d labels for %d images", pre, len(labels), B)
		}
		if err := prompt.Load(l.Params(), params); err != nil {
			return nil, fmt.Errorf("fedotp: %w", err)
		}
		per := len(img) / B
		opt := optim.NewSGD(h.Momentum, h.WeightDecay, false)
		var losses []float32
		for ep := 0; ep < h.LocalEpochs; ep++ {
			for lo := 0; lo < B; lo += h.BatchSize {
				hi := min(lo+h.BatchSize, B)
				loss, _, err := l.Step(img[lo*per:hi*per], labels[lo:hi])
				if err != nil {
					return nil, fmt.Errorf("fedotp: client %d batch %d: %w", k, lo/h.BatchSize, err)
				}
				losses = append(losses, float32(loss))
				if err := opt.Step(h.LR, prompt.OptimParams(l.Params(), l.Grads())); err != nil {
					return nil, fmt.Errorf("fedotp: client %d: %w", k, err)
				}
			}
		}
		out[pre+"batch_losses"] = &tensor.Tensor{Shape: []int{len(losses)}, Data: losses}
		trained[k] = l.Params().Clone()
		out[pre+"trained."+ParamCtx] = trained[k][ParamCtx]
		part, err := GlobalPart(trained[k], l.Cfg.AvgPrompt)
		if err != nil {
			return nil, err
		}
		if global == nil {
			global = tensor.Named{ParamCtx: tensor.New(part[ParamCtx].Shape...)}
		}
		w := float32(float64(n) / total)
		for i, v := range part[ParamCtx].Data {
			global[ParamCtx].Data[i] += w * v
		}
	}
	out["global."+ParamCtx] = global[ParamCtx]
	for k := range h.ClientSizes {
		next, err := WithGlobal(trained[k], global)
		if err != nil {
			return nil, err
		}
		out[fmt.Sprintf("client%d.next.%s", k, ParamCtx)] = next[ParamCtx]
	}
	return out, nil
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

// SurrogateGradient implements methods.SurrogateGradient: as the authors'
// code, the transport plan is computed without gradient (a constant of the
// backward pass), so the prompt's gradient is not that of the loss; the
// head's gradient with the plan held is checked by TestHeadGradient.
func (Method) SurrogateGradient() string {
	return "the optimal-transport plan is held constant in the backward pass"
}

// FixtureKeys implements parity.Settings: the hyper-parameters (metadata
// keys) its `pfedmma step` and `round` read; any other --set key is refused.
func (Method) FixtureKeys() []string {
	return []string{
		"avg_prompt", "batch_size", "class_token_position", "eps", "init_std", "local_epochs",
		"logit_scale", "lr", "max_iter", "momentum", "n_ctx", "num_prompt", "ot", "thresh", "top_percent",
		"weight_decay",
	}
}

var _ parity.Method = Method{}
