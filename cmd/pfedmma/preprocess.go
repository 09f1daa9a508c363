package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/predict"
)

func init() { rootCmd.AddCommand(newPreprocessCmd()) }

// newPreprocessCmd builds the preprocess subcommand (fresh flags each call).
func newPreprocessCmd() *cobra.Command {
	var c predict.PreprocessConfig
	cmd := &cobra.Command{
		Use:   "preprocess [--image FILE]... [FILE]... --out FILE.safetensors",
		Short: "Apply CLIP's image transform (PIL-exact resize, center crop, normalise) and save the tensors",
		Long: "Decodes each image (JPEG, PNG, GIF, BMP, WebP), resizes its shorter side to --size with\n" +
			"PIL's antialiased filter, center-crops --size×--size, normalises, and writes one F32\n" +
			"tensor [3,size,size] per image to a safetensors file, keyed by the image's base name.",
		RunE: func(cmd *cobra.Command, args []string) error {
			c := c
			c.Images = append(append([]string(nil), c.Images...), args...)
			if err := predict.Preprocess(cmd.Context(), c); err != nil {
				return fmt.Errorf("preprocess: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&c.Images, "image", nil, "image file (repeatable; positional arguments are added too)")
	f.IntVar(&c.Size, "size", 224, fmt.Sprintf("output side length (%d..%d)", predict.MinPreprocessSize, predict.MaxPreprocessSize))
	f.StringVar(&c.Out, "out", "", "output safetensors file")
	f.StringVar(&c.Interp, "interp", "", "resampling filter: bicubic or bilinear (default: bicubic for clip, bilinear for cifar)")
	f.StringVar(&c.Stats, "stats", "clip", "normalisation statistics: clip or cifar")
	f.IntVar(&c.Workers, "workers", 0, "decoding goroutines (default GOMAXPROCS)")
	return cmd
}
