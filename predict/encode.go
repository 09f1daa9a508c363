package predict

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/internal/memlimit"
	"github.com/pfedmma/pfedmma/preprocess"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tokenizer"
)

// Features are CLIP's image and text features (`pfedmma embed`), one row
// per input.
type Features struct {
	Image [][]float32 `json:"image_features"`
	Text  [][]float32 `json:"text_features"`
}

// EmbedConfig is one `pfedmma embed`: images (files, or the preprocessed
// "pixels" tensor [N, 3, S, S] of a safetensors file) and texts.
type EmbedConfig struct {
	// Model is the checkpoint (resolved); Vocab its vocabulary (default:
	// the one shipped with the model), read only when there are texts.
	Model, Vocab string
	Images       []string
	Pixels       string
	Texts        []string
	Normalize    bool
}

// Embed encodes c's images and texts with c's model, stopping between
// batches when ctx is cancelled.
func Embed(ctx context.Context, c EmbedConfig) (*Features, error) {
	if len(c.Images) > 0 && c.Pixels != "" {
		return nil, errors.New("give --image or --pixels, not both")
	}
	var m *clip.Model
	var tok *tokenizer.Tokenizer
	var err error
	if len(c.Texts) > 0 {
		m, tok, err = experiment.LoadModel(c.Model, c.Vocab)
	} else {
		m, err = experiment.LoadWeights(c.Model)
	}
	if err != nil {
		return nil, err
	}
	E, S := m.W.Config.EmbedDim, m.W.Config.Vision.ImageSize
	out := &Features{Image: [][]float32{}, Text: [][]float32{}}
	var px []float32
	n := 0
	switch {
	case c.Pixels != "":
		f, err := safetensors.Open(c.Pixels)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		t, err := f.Float32("pixels")
		if err != nil {
			return nil, err
		}
		if len(t.Shape) != 4 || t.Shape[1] != 3 || t.Shape[2] != S || t.Shape[3] != S {
			return nil, fmt.Errorf("%s: tensor \"pixels\" has shape %v, want [N 3 %d %d]", c.Pixels, t.Shape, S, S)
		}
		for i, x := range t.Data {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return nil, fmt.Errorf("%s: tensor \"pixels\" holds %v at index %d (image %d): pixels must be finite numbers", c.Pixels, x, i, i/(3*S*S))
			}
		}
		px, n = t.Data, t.Shape[0]
	case len(c.Images) > 0:
		if px, err = readImages(ctx, "embed", c.Images, S); err != nil {
			return nil, err
		}
		n = len(c.Images)
	}
	if n > 0 {
		slog.Info("embed: encoding images", "images", n)
		feat, err := EncodeImages(ctx, m, px, n, 32)
		if err != nil {
			return nil, err
		}
		out.Image = rows(feat, n, E, c.Normalize)
	}
	if len(c.Texts) > 0 {
		feat, err := encodeTexts(ctx, m, tok, c.Texts)
		if err != nil {
			return nil, err
		}
		out.Text = rows(feat, len(c.Texts), E, c.Normalize)
	}
	return out, nil
}

// ClassifyConfig is one `pfedmma zeroshot`: images classified against
// class names with prompts from a template.
type ClassifyConfig struct {
	// Model is the checkpoint (resolved); Vocab its vocabulary (default:
	// the one shipped with the model).
	Model, Vocab string
	Images       []string
	Classes      []string
	// Template holds {} where the class name goes.
	Template string
	Top      int
}

// Classify classifies c's images with frozen CLIP (c's model), keeping each
// image's c.Top most likely classes.
func Classify(ctx context.Context, c ClassifyConfig) (*Prediction, error) {
	var names []string
	for _, n := range c.Classes {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	switch {
	case len(names) == 0:
		return nil, errors.New("--classes is empty")
	case len(c.Images) == 0:
		return nil, errors.New("no --image given")
	case c.Top < 1:
		return nil, fmt.Errorf("--top %d: want at least 1 (the number of classes printed per image)", c.Top)
	case !strings.Contains(c.Template, "{}"):
		return nil, fmt.Errorf("--template %q has no {} placeholder", c.Template)
	}
	m, tok, err := experiment.LoadModel(c.Model, c.Vocab)
	if err != nil {
		return nil, err
	}
	prompts := make([]string, len(names))
	for i, n := range names {
		prompts[i] = strings.ReplaceAll(c.Template, "{}", strings.ReplaceAll(n, "_", " "))
	}
	txt, err := encodeTexts(ctx, m, tok, prompts)
	if err != nil {
		return nil, err
	}
	px, err := readImages(ctx, "zeroshot", c.Images, m.W.Config.Vision.ImageSize)
	if err != nil {
		return nil, err
	}
	img, err := EncodeImages(ctx, m, px, len(c.Images), 32)
	if err != nil {
		return nil, err
	}
	logits := clip.Logits(img, txt, len(c.Images), len(names), m.W.Config.EmbedDim, m.W.LogitScale)
	out := &Prediction{Images: make([]ImagePrediction, len(c.Images))}
	for i, path := range c.Images {
		top, err := Rank(logits[i*len(names):(i+1)*len(names)], names, c.Top)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out.Images[i] = ImagePrediction{Image: path, Top: top}
	}
	return out, nil
}

// readImages preprocesses image files for a model of image side S, after
// checking that they fit in the memory available (what: the command).
func readImages(ctx context.Context, what string, images []string, S int) ([]float32, error) {
	need := memlimit.Mul(int64(len(images)), 3, int64(S), int64(S), 4, 2)
	if err := memlimit.Check(fmt.Sprintf("%s of %d images of %d×%d pixels", what, len(images), S, S), need, memlimit.AvailableMiB(),
		"give fewer --image files per call"); err != nil {
		return nil, err
	}
	vals, err := preprocess.CLIPTransform(S).EvalFiles(ctx, images, 0)
	if err != nil {
		return nil, err
	}
	px := make([]float32, 0, len(images)*3*S*S)
	for _, v := range vals {
		px = append(px, v...)
	}
	return px, nil
}

// EncodeImages runs the image encoder (ViT or ResNet) over n images in
// batches, stopping between batches when ctx is cancelled.
func EncodeImages(ctx context.Context, m *clip.Model, px []float32, n, batch int) ([]float32, error) {
	S := m.W.Config.Vision.ImageSize
	E := m.W.Config.EmbedDim
	per := 3 * S * S
	feat := make([]float32, n*E)
	for s := 0; s < n; s += batch {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("stopped after %d of %d images: %w", s, n, err)
		}
		e := min(s+batch, n)
		if m.ResNet != nil {
			m.ResNet.Encode(feat[s*E:e*E], px[s*per:e*per], e-s)
		} else {
			m.Vision.Encode(feat[s*E:e*E], px[s*per:e*per], e-s)
		}
	}
	return feat, nil
}

// encodeTexts tokenises texts to the model's context length and runs the
// text encoder over them in batches of 256, stopping between batches when
// ctx is cancelled.
func encodeTexts(ctx context.Context, m *clip.Model, tok *tokenizer.Tokenizer, texts []string) ([]float32, error) {
	L, E := m.W.Config.Text.ContextLength, m.W.Config.EmbedDim
	ids := make([]int, 0, len(texts)*L)
	for _, s := range texts {
		t, err := tok.Tokenize(s, L, false)
		if err != nil {
			return nil, err
		}
		ids = append(ids, t...)
	}
	n, batch := len(texts), 256
	feat := make([]float32, 0, n*E)
	for s := 0; s < n; s += batch {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("stopped after %d of %d texts: %w", s, n, err)
		}
		e := min(s+batch, n)
		f, err := m.EncodeText(ids[s*L:e*L], e-s)
		if err != nil {
			return nil, err
		}
		feat = append(feat, f...)
	}
	return feat, nil
}

// rows splits a flat [n, d] slice into rows, optionally L2-normalised.
func rows(x []float32, n, d int, normalize bool) [][]float32 {
	if normalize {
		clip.Normalize(x, n, d)
	}
	out := make([][]float32, n)
	for i := range out {
		out[i] = x[i*d : i*d+d]
	}
	return out
}
