package main

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/internal/memlimit"
	"github.com/pfedmma/pfedmma/preprocess"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

func init() { rootCmd.AddCommand(newPreprocessCmd()) }

// Bounds of preprocess --size: CLIP models take 224–448; 4096 already makes
// 200 MB per image (--size 30000 once wrote 10.8 GB).
const (
	minPreprocessSize = 16
	maxPreprocessSize = 4096
)

// newPreprocessCmd builds the preprocess subcommand (fresh flags each call).
func newPreprocessCmd() *cobra.Command {
	var (
		images  []string
		size    int
		out     string
		interp  string
		stats   string
		workers int
	)
	cmd := &cobra.Command{
		Use:   "preprocess [--image FILE]... [FILE]... --out FILE.safetensors",
		Short: "Apply CLIP's image transform (PIL-exact resize, center crop, normalise) and save the tensors",
		Long: "Decodes each image (JPEG, PNG, GIF, BMP, WebP), resizes its shorter side to --size with\n" +
			"PIL's antialiased filter, center-crops --size×--size, normalises, and writes one F32\n" +
			"tensor [3,size,size] per image to a safetensors file, keyed by the image's base name.",
		RunE: func(cmd *cobra.Command, args []string) error {
			paths := append(append([]string(nil), images...), args...)
			if len(paths) == 0 {
				return fmt.Errorf("preprocess: no images (use --image FILE or list files)")
			}
			if out == "" {
				return fmt.Errorf("preprocess: --out is required")
			}
			if err := checkOutFile(out); err != nil {
				return fmt.Errorf("preprocess: %w", err)
			}
			if size < minPreprocessSize || size > maxPreprocessSize {
				return fmt.Errorf("preprocess: --size %d out of range [%d, %d] (each image is written as 3·size² float32)",
					size, minPreprocessSize, maxPreprocessSize)
			}
			var tr preprocess.Transform
			switch stats {
			case "clip":
				tr = preprocess.CLIPTransform(size)
			case "cifar":
				tr = preprocess.CIFARTransform(size)
			default:
				return fmt.Errorf("preprocess: --stats %q: want clip or cifar", stats)
			}
			switch interp {
			case "":
			case "bicubic":
				tr.Interp = preprocess.Bicubic
			case "bilinear":
				tr.Interp = preprocess.Bilinear
			default:
				return fmt.Errorf("preprocess: --interp %q: want bicubic or bilinear", interp)
			}
			keys := make([]string, len(paths))
			seen := map[string]string{}
			for i, p := range paths {
				k := filepath.Base(p)
				if prev, dup := seen[k]; dup {
					return fmt.Errorf("preprocess: %s and %s have the same base name %q", prev, p, k)
				}
				seen[k], keys[i] = p, k
			}
			// every image is held, then written: 2 copies of 3·size² float32
			need := memlimit.Mul(int64(len(paths)), 3, int64(size), int64(size), 4, 2)
			if err := memlimit.Check(fmt.Sprintf("preprocess of %d images at --size %d", len(paths), size), need, memlimit.AvailableMiB(),
				"lower --size or give fewer images per call"); err != nil {
				return fmt.Errorf("preprocess: %w", err)
			}
			data, err := tr.EvalFiles(cmd.Context(), paths, workers)
			if err != nil {
				return err
			}
			named := tensor.Named{}
			for i, k := range keys {
				t, err := tensor.FromData(data[i], 3, size, size)
				if err != nil {
					return fmt.Errorf("preprocess %s: %w", paths[i], err)
				}
				named[k] = t
			}
			meta := map[string]string{
				"transform": fmt.Sprintf("Resize(%d, %s) CenterCrop(%d) RGB ToTensor Normalize(%s)", size, tr.Interp, size, stats),
				"mean":      fmt.Sprint(tr.Mean),
				"std":       fmt.Sprint(tr.Std),
				"size":      strconv.Itoa(size),
			}
			if err := safetensors.Write(out, named, nil, meta); err != nil {
				return err
			}
			slog.Info("preprocess: wrote tensors", "images", len(paths), "size", size, "out", out)
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&images, "image", nil, "image file (repeatable; positional arguments are added too)")
	cmd.Flags().IntVar(&size, "size", 224, fmt.Sprintf("output side length (%d..%d)", minPreprocessSize, maxPreprocessSize))
	cmd.Flags().StringVar(&out, "out", "", "output safetensors file")
	cmd.Flags().StringVar(&interp, "interp", "", "resampling filter: bicubic or bilinear (default: bicubic for clip, bilinear for cifar)")
	cmd.Flags().StringVar(&stats, "stats", "clip", "normalisation statistics: clip or cifar")
	cmd.Flags().IntVar(&workers, "workers", 0, "decoding goroutines (default GOMAXPROCS)")
	return cmd
}
