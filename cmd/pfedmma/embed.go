package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/preprocess"
	"github.com/pfedmma/pfedmma/safetensors"
)

func init() {
	var model, vocab, pixels string
	var images, texts []string
	var normalize bool
	cmd := &cobra.Command{
		Use:   "embed --model PATH [--vocab FILE] (--image FILE... | --pixels FILE.safetensors) [--text STRING...] [--normalize]",
		Short: "Print CLIP image and text features as JSON",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(images) > 0 && pixels != "" {
				return fmt.Errorf("embed: give --image or --pixels, not both")
			}
			m, tok, err := loadModel(model, vocab, len(texts) > 0)
			if err != nil {
				return fmt.Errorf("embed: %w", err)
			}
			E := m.W.Config.EmbedDim
			out := struct {
				Image [][]float32 `json:"image_features"`
				Text  [][]float32 `json:"text_features"`
			}{Image: [][]float32{}, Text: [][]float32{}}

			var px []float32
			n := 0
			S := m.W.Config.Vision.ImageSize
			switch {
			case pixels != "":
				f, err := safetensors.Open(pixels)
				if err != nil {
					return fmt.Errorf("embed: %w", err)
				}
				t, err := f.Float32("pixels")
				if err != nil {
					return fmt.Errorf("embed: %w", err)
				}
				if len(t.Shape) != 4 || t.Shape[1] != 3 || t.Shape[2] != S || t.Shape[3] != S {
					return fmt.Errorf("embed: %s: tensor \"pixels\" has shape %v, want [N 3 %d %d]", pixels, t.Shape, S, S)
				}
				px, n = t.Data, t.Shape[0]
			case len(images) > 0:
				if err := checkImageMemory("embed", len(images), S); err != nil {
					return err
				}
				vals, err := preprocess.CLIPTransform(S).EvalFiles(cmd.Context(), images, 0)
				if err != nil {
					return fmt.Errorf("embed: %w", err)
				}
				for _, v := range vals {
					px = append(px, v...)
				}
				n = len(images)
			}
			if n > 0 {
				slog.Info("embed: encoding images", "images", n)
				feat, err := encodeImagesBatched(cmd.Context(), m, px, n, 32)
				if err != nil {
					return fmt.Errorf("embed: %w", err)
				}
				out.Image = rows(feat, n, E, normalize)
			}
			if len(texts) > 0 {
				ids, err := tokenizeAll(tok, texts, m.W.Config.Text.ContextLength)
				if err != nil {
					return fmt.Errorf("embed: %w", err)
				}
				feat, err := encodeTextsBatched(cmd.Context(), m, ids, len(texts), 256)
				if err != nil {
					return fmt.Errorf("embed: %w", err)
				}
				out.Text = rows(feat, len(texts), E, normalize)
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "CLIP checkpoint: .safetensors file or model folder (default: the embedded tiny model)")
	f.StringVar(&vocab, "vocab", "", "BPE vocabulary (default: the one shipped with the model)")
	f.StringArrayVar(&images, "image", nil, "image file (repeatable)")
	f.StringVar(&pixels, "pixels", "", "safetensors file with tensor \"pixels\" [N,3,H,W], already preprocessed")
	f.StringArrayVar(&texts, "text", nil, "text to embed (repeatable)")
	f.BoolVar(&normalize, "normalize", false, "L2-normalise the features")
	rootCmd.AddCommand(cmd)
}

// encodeImagesBatched runs the image encoder (ViT or ResNet) over n images
// in batches, stopping between batches when ctx is cancelled.
func encodeImagesBatched(ctx context.Context, m *clip.Model, px []float32, n, batch int) ([]float32, error) {
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

// encodeTextsBatched runs the text encoder over n tokenized texts in
// batches, stopping between batches when ctx is cancelled.
func encodeTextsBatched(ctx context.Context, m *clip.Model, ids []int, n, batch int) ([]float32, error) {
	L, E := m.W.Config.Text.ContextLength, m.W.Config.EmbedDim
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
