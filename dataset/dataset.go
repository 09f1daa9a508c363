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
	"os"
	"slices"
	"strings"

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
	// Decode decodes the file; nil means [image.Decode] (JPEG, PNG, GIF,
	// BMP and WebP are registered by this package).
	Decode DecodeFunc
}

// Load opens and decodes the file.
func (s FileSource) Load() (image.Image, error) {
	f, err := os.Open(s.Path)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", s.Path, err)
	}
	defer f.Close()
	dec := s.Decode
	if dec == nil {
		dec = image.Decode
	}
	img, _, err := dec(f)
	if err != nil {
		return nil, fmt.Errorf("image %s: decode: %w", s.Path, err)
	}
	return img, nil
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
