package checkpoint

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
)

// What `pfedmma inspect` prints about a checkpoint, as text or JSON.

var schemeLabels = map[Scheme]string{
	OpenAI: "OpenAI / open_clip names",
	HF:     "Hugging Face CLIPModel names",
}

// WriteText prints info as `pfedmma inspect` does: the checkpoint at path
// (as the user named it), its scheme, files, sizes and architecture.
func (info *Info) WriteText(w io.Writer, path string) error {
	c := info.Config
	vp, tp := towerParams(info)
	var sb strings.Builder
	row := func(k, format string, args ...any) {
		fmt.Fprintf(&sb, "%-12s %s\n", k, fmt.Sprintf(format, args...))
	}
	row("model", "%s", path)
	row("scheme", "%s (%s)", info.Scheme, schemeLabels[info.Scheme])
	row("files", "%s", strings.Join(info.Files, ", "))
	if info.ConfigFile != "" {
		row("config", "%s", info.ConfigFile)
	}
	if info.Prefix != "" {
		row("prefix", "%q (stripped)", info.Prefix)
	}
	row("dtype", "%s", strings.Join(info.DTypes, ", "))
	row("tensors", "%d", info.Tensors)
	row("parameters", "%s (%s; %.1f MiB as float32)", groupDigits(info.Params), humanCount(info.Params),
		float64(info.Params)*4/(1<<20))
	row("embed dim", "%d", c.EmbedDim)
	row("logit scale", "%.4g (logits = %.4g · cosine)", info.LogitScale, math.Exp(float64(info.LogitScale)))
	row("activation", "%s", info.Activation)
	v, t := c.Vision, c.Text
	if v.ResNet {
		// CLIP's ModifiedResNet: no patches, blocks or heads of a ViT
		row("vision", "ResNet (CLIP's modified ResNet with attention pooling) %d×%d px, %s params", v.ImageSize, v.ImageSize, humanCount(vp))
	} else {
		row("vision", "ViT %d×%d px, patch %d (%d×%d grid, %d tokens), %s params", v.ImageSize, v.ImageSize,
			v.PatchSize, v.Grid(), v.Grid(), v.Tokens(), humanCount(vp))
		row("", "width %d, %d layers, %d heads (head dim %d), MLP %d", v.Width, v.Layers, v.Heads, headDim(v.Width, v.Heads), v.MLPWidth)
	}
	row("text", "context %d, vocab %d, %s params", t.ContextLength, t.VocabSize, humanCount(tp))
	row("", "width %d, %d layers, %d heads (head dim %d), MLP %d", t.Width, t.Layers, t.Heads, headDim(t.Width, t.Heads), t.MLPWidth)
	if len(info.Metadata) > 0 {
		row("metadata", "%d keys", len(info.Metadata))
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

// infoJSON is the JSON `pfedmma inspect --json` prints.
type infoJSON struct {
	Model        string   `json:"model"`
	Scheme       Scheme   `json:"scheme"`
	Files        []string `json:"files"`
	ConfigFile   string   `json:"config_file,omitempty"`
	Prefix       string   `json:"prefix,omitempty"`
	DTypes       []string `json:"dtypes"`
	Tensors      int      `json:"tensors"`
	Params       int64    `json:"params"`
	VisionParams int64    `json:"vision_params"`
	TextParams   int64    `json:"text_params"`
	LogitScale   float32  `json:"logit_scale"`
	Activation   string   `json:"activation"`
	EmbedDim     int      `json:"embed_dim"`
	Vision       struct {
		ResNet    bool `json:"resnet,omitempty"`
		ImageSize int  `json:"image_size"`
		PatchSize int  `json:"patch_size"`
		Tokens    int  `json:"tokens"`
		Width     int  `json:"width"`
		Layers    int  `json:"layers"`
		Heads     int  `json:"heads"`
		MLPWidth  int  `json:"mlp_width"`
	} `json:"vision"`
	Text struct {
		ContextLength int `json:"context_length"`
		VocabSize     int `json:"vocab_size"`
		Width         int `json:"width"`
		Layers        int `json:"layers"`
		Heads         int `json:"heads"`
		MLPWidth      int `json:"mlp_width"`
	} `json:"text"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// WriteJSON prints info as `pfedmma inspect --json` does.
func (info *Info) WriteJSON(w io.Writer, path string) error {
	c := info.Config
	out := infoJSON{
		Model: path, Scheme: info.Scheme, Files: info.Files, ConfigFile: info.ConfigFile, Prefix: info.Prefix,
		DTypes: info.DTypes, Tensors: info.Tensors, Params: info.Params, LogitScale: info.LogitScale,
		Activation: info.Activation, EmbedDim: c.EmbedDim, Metadata: info.Metadata,
	}
	out.VisionParams, out.TextParams = towerParams(info)
	out.Vision.ResNet = c.Vision.ResNet
	out.Vision.ImageSize, out.Vision.PatchSize = c.Vision.ImageSize, c.Vision.PatchSize
	if !c.Vision.ResNet {
		out.Vision.Tokens = c.Vision.Tokens()
	}
	out.Vision.Width, out.Vision.Layers, out.Vision.Heads, out.Vision.MLPWidth = c.Vision.Width, c.Vision.Layers, c.Vision.Heads, c.Vision.MLPWidth
	out.Text.ContextLength, out.Text.VocabSize = c.Text.ContextLength, c.Text.VocabSize
	out.Text.Width, out.Text.Layers, out.Text.Heads, out.Text.MLPWidth = c.Text.Width, c.Text.Layers, c.Text.Heads, c.Text.MLPWidth
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// towerParams counts the parameters of each tower; a ResNet image tower
// (which the ViT layout does not describe) has what the text tower leaves.
func towerParams(info *Info) (vision, text int64) {
	vision, text = TowerParams(info.Config)
	if info.Config.Vision.ResNet {
		vision = info.Params - text
	}
	return vision, text
}

// headDim is width/heads, 0 when heads is 0.
func headDim(width, heads int) int {
	if heads <= 0 {
		return 0
	}
	return width / heads
}

// groupDigits writes n with thousands separators (1,768,065).
func groupDigits(n int64) string {
	s := fmt.Sprint(n)
	var sb strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			sb.WriteByte(',')
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// humanCount writes n in K/M/B units (149.6M).
func humanCount(n int64) string {
	f := float64(n)
	switch {
	case f >= 1e9:
		return fmt.Sprintf("%.2fB", f/1e9)
	case f >= 1e6:
		return fmt.Sprintf("%.2fM", f/1e6)
	case f >= 1e3:
		return fmt.Sprintf("%.1fK", f/1e3)
	}
	return fmt.Sprint(n)
}
