package promptsrc

import (
	"context"
	"fmt"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/parity"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// ConfigFromMeta reads PromptSRC's settings from a fixture's metadata:
// n_ctx_text, n_ctx_vision, prompt_depth_text, prompt_depth_vision,
// text_loss_weight, image_loss_weight (init_std when present).
func ConfigFromMeta(meta map[string]string, layers int) (Config, error) {
	c := DefaultConfig()
	ints := []struct {
		key string
		dst *int
	}{{"n_ctx_text", &c.NCtxText}, {"n_ctx_vision", &c.NCtxVision}, {"prompt_depth_text", &c.DepthText}, {"prompt_depth_vision", &c.DepthVision}}
	var err error
	for _, k := range ints {
		if *k.dst, err = prompt.MetaInt(meta, k.key); err != nil {
			return c, fmt.Errorf("promptsrc: %w", err)
		}
	}
	if c.TextWeight, err = prompt.MetaFloat(meta, "text_loss_weight"); err != nil {
		return c, fmt.Errorf("promptsrc: %w", err)
	}
	if c.ImageWeight, err = prompt.MetaFloat(meta, "image_loss_weight"); err != nil {
		return c, fmt.Errorf("promptsrc: %w", err)
	}
	if _, ok := meta["init_std"]; ok {
		if c.InitStd, err = prompt.MetaFloat(meta, "init_std"); err != nil {
			return c, fmt.Errorf("promptsrc: %w", err)
		}
	}
	if err := prompt.EndOnly(meta["class_token_position"], noPosition); err != nil {
		return c, fmt.Errorf("promptsrc: metadata %w", err)
	}
	return c, c.Validate(layers)
}

// noPosition says why class_token_position is refused.
const noPosition = "the authors' PromptSRC prompt learner (muzairkhattak/PromptSRC trainers/promptsrc.py) always builds [SOS][context][name]. (only end)"

// replay rebuilds the learner of a fixture file on m; the hand-crafted
// prompts are batch's "template_tokens".
func replay(m *clip.Model, batch tensor.Named) prompt.Replay[*Learner, Config] {
	wc := m.W.Config
	return prompt.Replay[*Learner, Config]{Name: "promptsrc",
		Config: func(meta map[string]string) (Config, error) {
			return ConfigFromMeta(meta, min(wc.Vision.Layers, wc.Text.Layers))
		},
		New: func(m *clip.Model, tokens []int, cfg Config) (*Learner, error) {
			template, err := prompt.Ints(batch, "template_tokens")
			if err != nil {
				return nil, fmt.Errorf("promptsrc: %w", err)
			}
			return New(m, tokens, template, cfg)
		},
		Scale: func(l *Learner, s float32) { l.LogitScale = s }}
}

// StepFromFile replays one training step in the layout of
// testdata/promptsrc/step.safetensors: params holds the five prompt
// tensors; batch "tokens" [C, Ctx], "template_tokens" [nT·C, Ctx], "labels"
// [B] and "images" [B, 3, S, S]; meta the settings (ConfigFromMeta), lr,
// momentum, weight_decay, logit_scale. The result holds "text_features",
// "image_features" (raw), "zs_text_features", "zs_image_features"
// (normalised), "logits", "zs_logits", the loss and its terms, "grad.<p>"
// and "step1.<p>" (one step of a fresh SGD).
func StepFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	l, h, err := replay(m, batch).Learner(m, params, batch, meta, false)
	if err != nil {
		return nil, err
	}
	batch, err = prompt.ImagePrefixes(m, batch, "")
	if err != nil {
		return nil, fmt.Errorf("promptsrc: %w", err)
	}
	labels, err := prompt.Ints(batch, "labels")
	if err != nil {
		return nil, fmt.Errorf("promptsrc: %w", err)
	}
	B := len(labels)
	rec := batch["image_features"]
	if rec.Shape[0] != B {
		return nil, fmt.Errorf("promptsrc: %d labels for %d images", B, rec.Shape[0])
	}
	out, err := prompt.StepOnce(l, rec.Data, labels, h)
	if err != nil {
		return nil, fmt.Errorf("promptsrc: %w", err)
	}
	// the step's forward pass (before the SGD step)
	cp := func(x []float32, shape ...int) *tensor.Tensor {
		return &tensor.Tensor{Shape: shape, Data: append([]float32(nil), x...)}
	}
	out["image_features"] = cp(l.imf, B, l.E)
	out["text_features"] = cp(l.tf, l.C, l.E)
	out["zs_text_features"] = cp(l.zt, l.C, l.E)
	out["zs_image_features"] = cp(l.zi, B, l.E)
	out["zs_logits"] = cp(l.zl, B, l.C)
	return out, nil
}

// SettingsFrom implements parity.Settings: the settings from the
// metadata; the anchor prompts are the fixture's "template_tokens".
func (Method) SettingsFrom(f *parity.Fixture) (config.Section, error) {
	wc := f.Model.W.Config
	c, err := ConfigFromMeta(f.Meta, min(wc.Vision.Layers, wc.Text.Layers))
	if err != nil {
		return nil, err
	}
	template, err := f.IntsOf("template_tokens")
	if err != nil {
		return nil, fmt.Errorf("promptsrc: the anchor prompts: %w", err)
	}
	s := &Settings{NCtxText: c.NCtxText, NCtxVision: c.NCtxVision, PromptDepthText: c.DepthText, PromptDepthVision: c.DepthVision,
		InitStd: c.InitStd, TextLossWeight: c.TextWeight, ImageLossWeight: c.ImageWeight, TemplateRows: template}
	// the GPA over local epochs where the metadata sets gpa_std > 0 (the
	// round fixture has none; its one epoch would make it the identity)
	for key, dst := range map[string]*float64{"gpa_mean": &s.GPAMean, "gpa_std": &s.GPAStd} {
		if _, ok := f.Meta[key]; ok {
			if *dst, err = prompt.MetaFloat(f.Meta, key); err != nil {
				return nil, fmt.Errorf("promptsrc: %w", err)
			}
		}
	}
	if s.GPAStd < 0 {
		return nil, fmt.Errorf("promptsrc: metadata gpa_std %g: must not be negative", s.GPAStd)
	}
	if s.GPAStd > 0 {
		if _, err := GaussianWeights(1, s.GPAMean, s.GPAStd); err != nil {
			return nil, fmt.Errorf("promptsrc: metadata: %w", err)
		}
	}
	return s, nil
}

// Step implements parity.Stepper: the layout of testdata/promptsrc/step.safetensors.
func (Method) Step(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	return StepFromFile(f.Model, f.Params, f.FloatBatch(), f.Meta)
}

// FixtureRound implements parity.Rounder: the plain round through the
// production client (client.FixtureRound: the clients in federation Sites,
// FedAvg of every prompt, the Coordinator) with each client's
// "client<i>.batch_losses" and "client<i>.next.<p>".
func (Method) FixtureRound(ctx context.Context, f *parity.Fixture) (tensor.Named, error) {
	return client.FixtureRound(ctx, f, Method{}, buildSpec)
}

// FixtureKeys implements parity.Settings: the hyper-parameters (metadata
// keys) its `pfedmma step` and `round` read; any other --set key is refused.
func (Method) FixtureKeys() []string {
	return []string{
		"batch_size", "class_token_position", "gpa_mean", "gpa_std", "image_loss_weight", "init_std", "local_epochs", "logit_scale", "lr", "momentum",
		"n_ctx_text", "n_ctx_vision", "prompt_depth_text", "prompt_depth_vision", "text_loss_weight", "weight_decay",
	}
}

var _ parity.Method = Method{}

// GPAFromFile replays testdata/promptsrc/gpa.safetensors: the learner
// trains max_epoch epochs over the batch's "images" and "labels" in stored
// order in batches of batch_size, one SGD throughout; after each epoch e
// the state joins the Gaussian sum with w_e (gpa_mean, gpa_std) and
// training continues from it; at the end the parameters are the sum. The
// result holds "batch_losses", "gpa_weights", "epoch<e>.<p>" and "gpa.<p>".
func GPAFromFile(m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	l, h, err := replay(m, batch).Learner(m, params, batch, meta, false)
	if err != nil {
		return nil, err
	}
	E, err := prompt.MetaInt(meta, "max_epoch")
	if err != nil {
		return nil, fmt.Errorf("promptsrc: %w", err)
	}
	bs, err := prompt.MetaInt(meta, "batch_size")
	if err != nil {
		return nil, fmt.Errorf("promptsrc: %w", err)
	}
	mean, err := prompt.MetaFloat(meta, "gpa_mean")
	if err != nil {
		return nil, fmt.Errorf("promptsrc: %w", err)
	}
	std, err := prompt.MetaFloat(meta, "gpa_std")
	if err != nil {
		return nil, fmt.Errorf("promptsrc: %w", err)
	}
	w, err := GaussianWeights(E, mean, std)
	if err != nil {
		return nil, err
	}
	if batch, err = prompt.ImagePrefixes(m, batch, ""); err != nil {
		return nil, fmt.Errorf("promptsrc: %w", err)
	}
	labels, err := prompt.Ints(batch, "labels")
	if err != nil {
		return nil, fmt.Errorf("promptsrc: %w", err)
	}
	rec := batch["image_features"]
	N, per := rec.Shape[0], rec.Shape[1]
	if len(labels) != N || bs < 1 {
		return nil, fmt.Errorf("promptsrc: %d labels for %d images, batch_size %d", len(labels), N, bs)
	}
	opt := optim.NewSGD(h.Momentum, h.WeightDecay, false)
	g := gpa{w: w}
	out := tensor.Named{}
	var losses []float32
	for e := 0; e < E; e++ {
		for i := 0; i < N; i += bs {
			j := min(i+bs, N)
			loss, _, _, err := l.Step(rec.Data[i*per:j*per], labels[i:j])
			if err != nil {
				return nil, fmt.Errorf("promptsrc: epoch %d: %w", e, err)
			}
			losses = append(losses, float32(loss))
			if err := opt.Step(h.LR, prompt.OptimParams(l.Params(), l.Grads())); err != nil {
				return nil, err
			}
		}
		for name, p := range l.Params() {
			out[fmt.Sprintf("epoch%d.%s", e, name)] = p.Clone()
		}
		g.add(e, l.Params())
	}
	g.into(l.Params())
	for name, p := range l.Params() {
		out["gpa."+name] = p.Clone()
	}
	out["batch_losses"] = &tensor.Tensor{Shape: []int{len(losses)}, Data: losses}
	wf := make([]float32, E)
	for i, v := range w {
		wf[i] = float32(v)
	}
	out["gpa_weights"] = &tensor.Tensor{Shape: []int{E}, Data: wf}
	return out, nil
}
