package dataset

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/gif"  // register GIF for FileSource
	_ "image/jpeg" // register JPEG for FileSource
	_ "image/png"  // register PNG for FileSource
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pfedmma/pfedmma/internal/inputfile"
	"github.com/pfedmma/pfedmma/preprocess"
	_ "golang.org/x/image/bmp"  // register BMP for FileSource
	_ "golang.org/x/image/webp" // register WebP for FileSource
)

// Item is one labelled image of a dataset.
type Item struct {
	// Key is a stable identifier unique within the dataset, e.g. the image
	// path relative to the dataset folder or "cifar10/train/123".
	Key string
	// Label is the class index into [Dataset.Classes].
	Label int
	// Domain is the domain index into [Dataset.Domains] (0 for
	// single-domain datasets).
	Domain int
	// Source loads the image on demand.
	Source ImageSource
}

// Dataset is a labelled image dataset with its standard splits.
type Dataset struct {
	// Name is the loader name, e.g. "caltech101".
	Name string
	// Classes are prompt-ready class names in label order.
	Classes []string
	// Domains are domain names in domain-index order; a single-domain
	// dataset has one entry equal to Name.
	Domains []string
	// Train, Val and Test are the splits; Val may be empty.
	Train, Val, Test []Item
}

// ImageSource yields an image when asked; implementations read lazily.
type ImageSource interface {
	// Load returns the decoded image.
	Load() (image.Image, error)
}

// DecodeFunc decodes an image from r; [image.Decode] has this signature.
type DecodeFunc func(r io.Reader) (image.Image, string, error)

// FileSource is an image stored in a file.
type FileSource struct {
	// Path is the file path.
	Path string
	// Root, when set, is the folder (symlinks resolved) the file must lie
	// in once its own symlinks are resolved: a split-file entry cannot
	// reach outside the dataset through a link.
	Root string
	// Decode decodes the file; nil means [preprocess.DecodeReader] (JPEG,
	// PNG, GIF, BMP and WebP), which refuses images whose header announces
	// more than [preprocess.MaxPixels] pixels before allocating them.
	Decode DecodeFunc
}

// Load opens and decodes the file; non-regular files (FIFOs, devices) are
// refused before they are opened.
func (s FileSource) Load() (image.Image, error) {
	if s.Root != "" {
		real, err := filepath.EvalSymlinks(s.Path)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.Path, err)
		}
		if !within(s.Root, real) {
			return nil, fmt.Errorf("image %s: resolves to %s, outside the dataset folder %s", s.Path, real, s.Root)
		}
	}
	f, err := inputfile.Open(s.Path)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", s.Path, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > preprocess.MaxFileBytes {
		return nil, fmt.Errorf("image %s: %d bytes, over the limit of %d for an image file", s.Path, st.Size(), preprocess.MaxFileBytes)
	}
	var img image.Image
	if s.Decode != nil {
		img, _, err = s.Decode(f)
	} else {
		img, err = preprocess.DecodeReader(f)
	}
	if err != nil {
		return nil, fmt.Errorf("image %s: decode: %w", s.Path, err)
	}
	return img, nil
}

// within reports whether path lies in folder dir (both cleaned, absolute
// or both relative to the same folder).
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && filepath.IsLocal(rel)
}

// resolvedRoot returns dir with its symlinks resolved (dir itself when that
// fails: the files' own checks report the problem).
func resolvedRoot(dir string) string {
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		if abs, err := filepath.Abs(r); err == nil {
			return abs
		}
		return r
	}
	return dir
}

// localPath checks a dataset entry's relative path: slash-separated, not
// absolute, and not climbing out of its folder with "..".
func localPath(p string) (string, error) {
	rel := filepath.FromSlash(p)
	if p == "" || path.IsAbs(p) || filepath.IsAbs(rel) || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("path %q must be relative and stay inside the dataset folder", p)
	}
	return rel, nil
}

// Pixels is an image held in memory as 8-bit samples (CIFAR, Fashion-MNIST).
type Pixels struct {
	// Width and Height are the image size.
	Width, Height int
	// Channels is 1 (gray) or 3 (RGB).
	Channels int
	// Planar means Pix holds whole channel planes one after another
	// (CIFAR's R, G, B planes) instead of interleaved samples.
	Planar bool
	// Pix holds Width*Height*Channels samples, rows top to bottom.
	Pix []byte
}

// Load returns a fresh *image.Gray (1 channel) or *image.RGBA (3 channels)
// holding a copy of the pixels.
func (p Pixels) Load() (image.Image, error) {
	n := p.Width * p.Height
	if p.Width <= 0 || p.Height <= 0 || len(p.Pix) != n*p.Channels {
		return nil, fmt.Errorf("pixels: %dx%dx%d image with %d samples", p.Width, p.Height, p.Channels, len(p.Pix))
	}
	r := image.Rect(0, 0, p.Width, p.Height)
	switch p.Channels {
	case 1:
		img := image.NewGray(r)
		copy(img.Pix, p.Pix)
		return img, nil
	case 3:
		img := image.NewRGBA(r)
		for i := range n {
			var c color.RGBA
			if p.Planar {
				c = color.RGBA{p.Pix[i], p.Pix[n+i], p.Pix[2*n+i], 255}
			} else {
				c = color.RGBA{p.Pix[3*i], p.Pix[3*i+1], p.Pix[3*i+2], 255}
			}
			img.Pix[4*i], img.Pix[4*i+1], img.Pix[4*i+2], img.Pix[4*i+3] = c.R, c.G, c.B, c.A
		}
		return img, nil
	}
	return nil, fmt.Errorf("pixels: unsupported channel count %d", p.Channels)
}

// Options tune loading. The zero value is valid.
type Options struct {
	// Seed seeds every generated split: a missing CoOp split file, an
	// ImageFolder without train/test folders, and ValFraction.
	Seed uint64
	// NoWriteSplit keeps a generated CoOp split in memory only instead of
	// writing split_zhou_*.json next to the images.
	NoWriteSplit bool
	// Domains selects the sites of DomainNet / Office-Caltech10, in this
	// order; empty means all sites in the standard order.
	Domains []string
	// ValFraction, when in (0,1), moves that fraction of each class's
	// training images (rounded half to even) into Val for datasets that
	// ship no validation split. It is ignored when Val is already filled.
	ValFraction float64
	// Decode overrides the decoder of file-backed images.
	Decode DecodeFunc
	// NumClasses, TrainPerClass, TestPerClass and ImageSize size a
	// generated dataset (the "world" dataset); 0 keeps its defaults.
	// Loaders of datasets on disk ignore them.
	NumClasses, TrainPerClass, TestPerClass, ImageSize int
}

// ErrInvalid marks a dataset whose contents are inconsistent
// (labels out of range, duplicate keys, ...).
var ErrInvalid = errors.New("invalid dataset")

// Validate checks that every item has a non-empty unique key, a label in
// [0, len(Classes)), a domain in [0, len(Domains)) and a source.
func (d *Dataset) Validate() error {
	if len(d.Classes) == 0 {
		return fmt.Errorf("dataset %s: %w: no classes", d.Name, ErrInvalid)
	}
	if len(d.Domains) == 0 {
		return fmt.Errorf("dataset %s: %w: no domains", d.Name, ErrInvalid)
	}
	seen := make(map[string]string, len(d.Train)+len(d.Val)+len(d.Test))
	for _, sp := range []struct {
		name  string
		items []Item
	}{{"train", d.Train}, {"val", d.Val}, {"test", d.Test}} {
		for i, it := range sp.items {
			where := func() string { return fmt.Sprintf("dataset %s: %s[%d] %q", d.Name, sp.name, i, it.Key) }
			switch {
			case it.Key == "":
				return fmt.Errorf("%s: %w: empty key", where(), ErrInvalid)
			case it.Label < 0 || it.Label >= len(d.Classes):
				return fmt.Errorf("%s: %w: label %d outside [0,%d)", where(), ErrInvalid, it.Label, len(d.Classes))
			case it.Domain < 0 || it.Domain >= len(d.Domains):
				return fmt.Errorf("%s: %w: domain %d outside [0,%d)", where(), ErrInvalid, it.Domain, len(d.Domains))
			case it.Source == nil:
				return fmt.Errorf("%s: %w: no image source", where(), ErrInvalid)
			}
			if prev, ok := seen[it.Key]; ok {
				return fmt.Errorf("%s: %w: key also in %s", where(), ErrInvalid, prev)
			}
			seen[it.Key] = sp.name
		}
	}
	return nil
}

// PromptName turns a folder or split-file class name into a prompt-ready
// one: '_' becomes a space.
func PromptName(name string) string { return strings.ReplaceAll(name, "_", " ") }

// roundHalfEven rounds like Python 3's round(), which CoOp's split code uses.
func roundHalfEven(x float64) int { return int(math.RoundToEven(x)) }

// newRand returns the package's seeded generator; stream separates uses.
func newRand(seed, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, stream))
}

// Streams of newRand, one per kind of generated split.
const (
	streamCoOpSplit uint64 = 0x636f6f70 + iota
	streamFolderSplit
	streamValSplit
)

// carveVal moves a per-class fraction of train into val, seeded. Classes are
// visited in label order and the order of the remaining items is kept.
func carveVal(train []Item, frac float64, seed uint64) (rest, val []Item) {
	if frac <= 0 || frac >= 1 || len(train) == 0 {
		return train, nil
	}
	byClass := map[int][]int{}
	for i, it := range train {
		byClass[it.Label] = append(byClass[it.Label], i)
	}
	labels := slices.Sorted(maps.Keys(byClass))
	rng := newRand(seed, streamValSplit)
	inVal := make([]bool, len(train))
	for _, l := range labels {
		idx := byClass[l]
		rng.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
		for _, i := range idx[:roundHalfEven(float64(len(idx))*frac)] {
			inVal[i] = true
		}
	}
	for i, it := range train {
		if inVal[i] {
			val = append(val, it)
		} else {
			rest = append(rest, it)
		}
	}
	return rest, val
}

// isImageFile reports whether name has an extension this package decodes.
func isImageFile(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return false
	}
	switch strings.ToLower(name[i+1:]) {
	case "jpg", "jpeg", "png", "gif", "bmp", "webp":
		return true
	}
	return false
}
