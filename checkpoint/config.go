package checkpoint

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/inputfile"
)

// hfConfig is the part of a transformers CLIPConfig (config.json) that the
// loader reads. Pointers tell absent fields from zero.
type hfConfig struct {
	ModelType     string   `json:"model_type,omitempty"`
	Architectures []string `json:"architectures,omitempty"`
	ProjectionDim *int     `json:"projection_dim,omitempty"`
	LogitScale    *float64 `json:"logit_scale_init_value,omitempty"`
	TextConfig    hfTower  `json:"text_config"`
	VisionConfig  hfTower  `json:"vision_config"`
}

type hfTower struct {
	HiddenSize            *int     `json:"hidden_size,omitempty"`
	IntermediateSize      *int     `json:"intermediate_size,omitempty"`
	NumAttentionHeads     *int     `json:"num_attention_heads,omitempty"`
	NumHiddenLayers       *int     `json:"num_hidden_layers,omitempty"`
	ImageSize             *int     `json:"image_size,omitempty"`
	PatchSize             *int     `json:"patch_size,omitempty"`
	NumChannels           *int     `json:"num_channels,omitempty"`
	MaxPositionEmbeddings *int     `json:"max_position_embeddings,omitempty"`
	VocabSize             *int     `json:"vocab_size,omitempty"`
	HiddenAct             *string  `json:"hidden_act,omitempty"`
	LayerNormEps          *float64 `json:"layer_norm_eps,omitempty"`
	ProjectionDim         *int     `json:"projection_dim,omitempty"`
}

// openCLIPConfig is the part of open_clip's open_clip_config.json that the
// loader reads.
type openCLIPConfig struct {
	ModelCfg struct {
		EmbedDim  *int  `json:"embed_dim"`
		QuickGELU *bool `json:"quick_gelu"`
		VisionCfg struct {
			ImageSize *int     `json:"image_size"`
			Layers    *int     `json:"layers"`
			Width     *int     `json:"width"`
			PatchSize *int     `json:"patch_size"`
			HeadWidth *int     `json:"head_width"`
			MLPRatio  *float64 `json:"mlp_ratio"`
		} `json:"vision_cfg"`
		TextCfg struct {
			ContextLength *int `json:"context_length"`
			VocabSize     *int `json:"vocab_size"`
			Width         *int `json:"width"`
			Heads         *int `json:"heads"`
			Layers        *int `json:"layers"`
		} `json:"text_cfg"`
	} `json:"model_cfg"`
}

// field is one config value to compare with the value the shapes imply.
type field struct {
	name  string
	conf  *int
	shape int
}

func (s *source) compare(file string, fields []field) error {
	for _, f := range fields {
		if f.conf != nil && *f.conf != f.shape {
			return fmt.Errorf("checkpoint %s: %w: %s is %d but the tensor shapes give %d",
				file, ErrMismatch, f.name, *f.conf, f.shape)
		}
	}
	return nil
}

// applyConfig takes head counts and the activation from the config file
// that matches the scheme, and checks its sizes against the shapes.
func (s *source) applyConfig(scheme Scheme, cfg *clip.Config, info *Info) error {
	path := s.configs[scheme]
	if path == "" {
		return nil
	}
	info.ConfigFile = path
	b, err := inputfile.ReadFile(path)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if scheme == HF {
		return s.applyHFConfig(path, b, cfg, info)
	}
	return s.applyOpenCLIPConfig(path, b, cfg, info)
}

// applyHFConfig checks a Hugging Face config.json (b, read from path)
// against cfg, then takes its attention head counts and activations.
func (s *source) applyHFConfig(path string, b []byte, cfg *clip.Config, info *Info) error {
	vc, tc := &cfg.Vision, &cfg.Text
	var c hfConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	v, t := c.VisionConfig, c.TextConfig
	err := s.compare(path, []field{
		{"projection_dim", c.ProjectionDim, cfg.EmbedDim},
		{"vision_config.hidden_size", v.HiddenSize, vc.Width},
		{"vision_config.intermediate_size", v.IntermediateSize, vc.MLPWidth},
		{"vision_config.num_hidden_layers", v.NumHiddenLayers, vc.Layers},
		{"vision_config.image_size", v.ImageSize, vc.ImageSize},
		{"vision_config.patch_size", v.PatchSize, vc.PatchSize},
		{"text_config.hidden_size", t.HiddenSize, tc.Width},
		{"text_config.intermediate_size", t.IntermediateSize, tc.MLPWidth},
		{"text_config.num_hidden_layers", t.NumHiddenLayers, tc.Layers},
		{"text_config.max_position_embeddings", t.MaxPositionEmbeddings, tc.ContextLength},
		{"text_config.vocab_size", t.VocabSize, tc.VocabSize},
	})
	if err != nil {
		return err
	}
	if v.NumAttentionHeads != nil {
		vc.Heads = *v.NumAttentionHeads
	}
	if t.NumAttentionHeads != nil {
		tc.Heads = *t.NumAttentionHeads
	}
	va, ta := "quick_gelu", "quick_gelu" // the CLIPConfig default
	if v.HiddenAct != nil {
		va = *v.HiddenAct
	}
	if t.HiddenAct != nil {
		ta = *t.HiddenAct
	}
	info.Activation = va
	if va != ta {
		info.Activation = "vision " + va + ", text " + ta
	}
	return nil
}

// applyOpenCLIPConfig checks an open_clip config (b, read from path) against
// cfg, then takes its head counts and activation, with open_clip's defaults.
func (s *source) applyOpenCLIPConfig(path string, b []byte, cfg *clip.Config, info *Info) error {
	vc, tc := &cfg.Vision, &cfg.Text
	var c openCLIPConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	m := c.ModelCfg
	err := s.compare(path, []field{
		{"model_cfg.embed_dim", m.EmbedDim, cfg.EmbedDim},
		{"model_cfg.vision_cfg.image_size", m.VisionCfg.ImageSize, vc.ImageSize},
		{"model_cfg.vision_cfg.layers", m.VisionCfg.Layers, vc.Layers},
		{"model_cfg.vision_cfg.width", m.VisionCfg.Width, vc.Width},
		{"model_cfg.vision_cfg.patch_size", m.VisionCfg.PatchSize, vc.PatchSize},
		{"model_cfg.text_cfg.context_length", m.TextCfg.ContextLength, tc.ContextLength},
		{"model_cfg.text_cfg.vocab_size", m.TextCfg.VocabSize, tc.VocabSize},
		{"model_cfg.text_cfg.width", m.TextCfg.Width, tc.Width},
		{"model_cfg.text_cfg.layers", m.TextCfg.Layers, tc.Layers},
	})
	if err != nil {
		return err
	}
	// open_clip's defaults: head_width 64, text heads 8, GELU.
	hw := 64
	if m.VisionCfg.HeadWidth != nil {
		hw = *m.VisionCfg.HeadWidth
	}
	if hw <= 0 || vc.Width%hw != 0 {
		return fmt.Errorf("checkpoint %s: %w: vision width %d is not a multiple of model_cfg.vision_cfg.head_width %d",
			path, ErrMismatch, vc.Width, hw)
	}
	vc.Heads = vc.Width / hw
	tc.Heads = 8
	if m.TextCfg.Heads != nil {
		tc.Heads = *m.TextCfg.Heads
	}
	info.Activation = "gelu"
	if m.QuickGELU != nil && *m.QuickGELU {
		info.Activation = "quick_gelu"
	}
	return nil
}

// metaHeads applies head counts recorded by Save in the file metadata.
func (s *source) metaHeads(meta map[string]string, cfg *clip.Config) error {
	for _, h := range []struct {
		key string
		dst *int
	}{{MetaVisionHeads, &cfg.Vision.Heads}, {MetaTextHeads, &cfg.Text.Heads}} {
		v, ok := meta[h.key]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("checkpoint %s: %w: metadata %q = %q, want a positive integer", s.path, ErrMismatch, h.key, v)
		}
		*h.dst = n
	}
	return nil
}
