package predict

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"

	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/internal/memlimit"
	"github.com/pfedmma/pfedmma/preprocess"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

// Bounds of preprocess --size: CLIP models take 224–448; 4096 already makes
// 200 MB per image (--size 30000 once wrote 10.8 GB).
const (
	MinPreprocessSize = 16
	MaxPreprocessSize = 4096
)

// PreprocessConfig is one `pfedmma preprocess`: images through CLIP's (or
// CIFAR's) transform into one safetensors file.
type PreprocessConfig struct {
	Images []string
	// Out is the safetensors file written.
	Out string
	// Size is the side of the square output.
	Size int
	// Stats is the normalisation: clip or cifar; Interp the resampling
	// filter (bicubic or bilinear; empty: the statistics' default).
	Stats, Interp string
	// Workers decode images in parallel (0: GOMAXPROCS).
	Workers int
}

// Preprocess decodes each image, resizes its shorter side to c.Size with
// PIL's antialiased filter, center-crops c.Size×c.Size, normalises, and
// writes one float32 tensor [3, size, size] per image to c.Out, keyed by
// the image's base name.
func Preprocess(ctx context.Context, c PreprocessConfig) error {
	if len(c.Images) == 0 {
		return errors.New("no images (use --image FILE or list files)")
	}
	if c.Out == "" {
		return errors.New("--out is required")
	}
	if err := atomicfile.CheckTarget(c.Out); err != nil {
		return fmt.Errorf("--out %w", err)
	}
	if c.Size < MinPreprocessSize || c.Size > MaxPreprocessSize {
		return fmt.Errorf("--size %d out of range [%d, %d] (each image is written as 3·size² float32)",
			c.Size, MinPreprocessSize, MaxPreprocessSize)
	}
	tr, err := transform(c)
	if err != nil {
		return err
	}
	keys := make([]string, len(c.Images))
	seen := map[string]string{}
	for i, p := range c.Images {
		k := filepath.Base(p)
		if prev, dup := seen[k]; dup {
			return fmt.Errorf("%s and %s have the same base name %q", prev, p, k)
		}
		seen[k], keys[i] = p, k
	}
	// every image is held, then written: 2 copies of 3·size² float32
	need := memlimit.Mul(int64(len(c.Images)), 3, int64(c.Size), int64(c.Size), 4, 2)
	if err := memlimit.Check(fmt.Sprintf("preprocess of %d images at --size %d", len(c.Images), c.Size), need, memlimit.AvailableMiB(),
		"lower --size or give fewer images per call"); err != nil {
		return err
	}
	data, err := tr.EvalFiles(ctx, c.Images, c.Workers)
	if err != nil {
		return err
	}
	named := tensor.Named{}
	for i, k := range keys {
		t, err := tensor.FromData(data[i], 3, c.Size, c.Size)
		if err != nil {
			return fmt.Errorf("%s: %w", c.Images[i], err)
		}
		named[k] = t
	}
	meta := map[string]string{
		"transform": fmt.Sprintf("Resize(%d, %s) CenterCrop(%d) RGB ToTensor Normalize(%s)", c.Size, tr.Interp, c.Size, c.Stats),
		"mean":      fmt.Sprint(tr.Mean),
		"std":       fmt.Sprint(tr.Std),
		"size":      strconv.Itoa(c.Size),
	}
	if err := safetensors.Write(c.Out, named, nil, meta); err != nil {
		return err
	}
	slog.Info("preprocess: wrote tensors", "images", len(c.Images), "size", c.Size, "out", c.Out)
	return nil
}

// transform is the image transform c's --stats and --interp name.
func transform(c PreprocessConfig) (preprocess.Transform, error) {
	var tr preprocess.Transform
	switch c.Stats {
	case "clip":
		tr = preprocess.CLIPTransform(c.Size)
	case "cifar":
		tr = preprocess.CIFARTransform(c.Size)
	default:
		return tr, fmt.Errorf("--stats %q: want clip or cifar", c.Stats)
	}
	switch c.Interp {
	case "":
	case "bicubic":
		tr.Interp = preprocess.Bicubic
	case "bilinear":
		tr.Interp = preprocess.Bilinear
	default:
		return tr, fmt.Errorf("--interp %q: want bicubic or bilinear", c.Interp)
	}
	return tr, nil
}
