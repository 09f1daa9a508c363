package checkpoint

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

// Tensors returns w's parameters named and shaped as in scheme. Tensors
// that need no rearranging share memory with w.
func Tensors(w *clip.Weights, scheme Scheme) (tensor.Named, error) {
	if scheme != OpenAI && scheme != HF {
		return nil, fmt.Errorf("checkpoint: unknown scheme %q", scheme)
	}
	if err := Validate(w); err != nil {
		return nil, err
	}
	out := make(tensor.Named)
	for _, p := range layout(w.Config, scheme, w, []float32{w.LogitScale}) {
		data := p.dst
		if p.transpose {
			data = make([]float32, len(p.dst))
			transpose2(data, p.dst, p.shape[1], p.shape[0])
		}
		out[p.name] = &tensor.Tensor{Shape: p.shape, Data: data}
	}
	return out, nil
}

// Save writes w in scheme. For OpenAI, path is the .safetensors file to
// write (head counts go into its metadata). For HF, path is a folder that
// receives config.json and model.safetensors. Files are replaced
// atomically. opts may select F16 or BF16 storage.
func Save(path string, w *clip.Weights, scheme Scheme, opts ...safetensors.Option) error {
	named, err := Tensors(w, scheme)
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	meta := map[string]string{"format": "pt"}
	if scheme == OpenAI {
		meta[MetaVisionHeads] = strconv.Itoa(w.Config.Vision.Heads)
		meta[MetaTextHeads] = strconv.Itoa(w.Config.Text.Heads)
		return safetensors.Write(path, named, nil, meta, opts...)
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	b, err := json.MarshalIndent(hfConfigOf(w.Config), "", "  ")
	if err != nil {
		return fmt.Errorf("checkpoint %s: config: %w", path, err)
	}
	cfgPath := filepath.Join(path, "config.json")
	err = atomicfile.Write(cfgPath, func(wr io.Writer) error {
		_, err := wr.Write(append(b, '\n'))
		return err
	})
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", cfgPath, err)
	}
	return safetensors.Write(filepath.Join(path, "model.safetensors"), named, nil, meta, opts...)
}

// hfConfigOf is the transformers CLIPConfig of cfg.
func hfConfigOf(cfg clip.Config) hfConfig {
	p := func(v int) *int { return &v }
	act := "quick_gelu"
	three := 3
	eps := 1e-5
	scale := math.Log(1 / 0.07)
	return hfConfig{
		ModelType:     "clip",
		Architectures: []string{"CLIPModel"},
		ProjectionDim: p(cfg.EmbedDim),
		LogitScale:    &scale,
		VisionConfig: hfTower{
			HiddenSize: p(cfg.Vision.Width), IntermediateSize: p(cfg.Vision.MLPWidth),
			NumAttentionHeads: p(cfg.Vision.Heads), NumHiddenLayers: p(cfg.Vision.Layers),
			ImageSize: p(cfg.Vision.ImageSize), PatchSize: p(cfg.Vision.PatchSize), NumChannels: &three,
			HiddenAct: &act, LayerNormEps: &eps, ProjectionDim: p(cfg.EmbedDim),
		},
		TextConfig: hfTower{
			HiddenSize: p(cfg.Text.Width), IntermediateSize: p(cfg.Text.MLPWidth),
			NumAttentionHeads: p(cfg.Text.Heads), NumHiddenLayers: p(cfg.Text.Layers),
			MaxPositionEmbeddings: p(cfg.Text.ContextLength), VocabSize: p(cfg.Text.VocabSize),
			HiddenAct: &act, LayerNormEps: &eps, ProjectionDim: p(cfg.EmbedDim),
		},
	}
}

// Equal reports the first difference between a and b (config, a tensor's
// values bit for bit, or the logit scale), or nil when they are identical.
func Equal(a, b *clip.Weights) error {
	if err := Validate(a); err != nil {
		return fmt.Errorf("first: %w", err)
	}
	if err := Validate(b); err != nil {
		return fmt.Errorf("second: %w", err)
	}
	if a.Config != b.Config {
		return fmt.Errorf("configs differ: %s vs %s", describe(a.Config), describe(b.Config))
	}
	pa := layout(a.Config, OpenAI, a, []float32{a.LogitScale})
	pb := layout(b.Config, OpenAI, b, []float32{b.LogitScale})
	for i := range pa {
		for j := range pa[i].dst {
			x, y := pa[i].dst[j], pb[i].dst[j]
			if math.Float32bits(x) != math.Float32bits(y) {
				return fmt.Errorf("tensor %q differs at %d: %g vs %g", pa[i].name, j, x, y)
			}
		}
	}
	return nil
}
