package fedpha

import (
	"fmt"
	"slices"

	"github.com/pfedmma/pfedmma/clip"
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
	h, err := prompt.ReadHyper(meta, false)
	if err != nil {
		return nil, fmt.Errorf("fedpha: %w", err)
	}
	cfg, err := ConfigFromMeta(meta)
	if err != nil {
		return nil, err
	}
	tokens, err := prompt.Ints(batch, "tokens")
	if err != nil {
		return nil, fmt.Errorf("fedpha: %w", err)
	}
	l, err := New(m, tokens, cfg)
	if err != nil {
		return nil, err
	}
	l.LogitScale = float32(h.LogitScale)
	if err := prompt.Load(l.Params(), params); err != nil {
		return nil, fmt.Errorf("fedpha: %w", err)
	}
	img, B, err := prompt.ImageFeatures(m, batch, "")
	if err != nil {
		return nil, fmt.Errorf("fedpha: %w", err)
	}
	labels, err := prompt.Ints(batch, "labels")
	if err != nil {
		return nil, fmt.Errorf("fedpha: %w", err)
	}
	if len(labels) != B {
		return nil, fmt.Errorf("fedpha: %d labels for %d images", len(labels), B)
	}
	out, err := prompt.StepOnce(l, img, labels, h)
	if err != nil {
		return nil, fmt.Errorf("fedpha: %w", err)
	}
	C, E, D, n := l.C, l.E, l.D, cfg.NCtx
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
	return out, nil
}
