package preprocess

import (
	"fmt"
	"image"
	"math"
	"math/rand/v2"
)

// CLIP's normalisation statistics (OpenAI CLIP, clip.py _transform).
var (
	CLIPMean = [3]float32{0.48145466, 0.4578275, 0.40821073}
	CLIPStd  = [3]float32{0.26862954, 0.26130258, 0.27577711}
)

// CIFAR-10 normalisation statistics as commonly used by the federated CLIP
// reference code bases for CIFAR (per-channel mean and std of the training set).
var (
	CIFARMean = [3]float32{0.4914, 0.4822, 0.4465}
	CIFARStd  = [3]float32{0.2023, 0.1994, 0.2010}
)

// Normalize converts src to float32 in PyTorch's [3,H,W] layout the way
// ToTensor and Normalize do: v/255, then (v - mean)/std, every step rounded to
// float32. The result goes into dst when it has room (len ≥ 3·W·H), else into a
// new slice; the filled slice is returned. A malformed src gives nil.
func Normalize(src *RGB, mean, std [3]float32, dst []float32) []float32 {
	if src.Validate() != nil {
		return nil
	}
	return normalizeInto(src.Pix, src.W, src.H, makeLUT(mean, std), false, dst)
}

// lut maps an 8-bit value of each channel to its normalised float32.
type lut [3][256]float32

func makeLUT(mean, std [3]float32) *lut {
	var t lut
	for c := range 3 {
		for v := range 256 {
			x := float32(v) / 255
			x = x - mean[c]
			t[c][v] = x / std[c]
		}
	}
	return &t
}

// normalizeInto writes the planar normalised image (mirrored left to right
// when flip is set) of the interleaved RGB pix (w×h).
func normalizeInto(pix []uint8, w, h int, t *lut, flip bool, dst []float32) []float32 {
	n := w * h
	if cap(dst) >= 3*n {
		dst = dst[:3*n]
	} else {
		dst = make([]float32, 3*n)
	}
	r, g, b := dst[:n], dst[n:2*n], dst[2*n:]
	for y := 0; y < h; y++ {
		row := pix[3*y*w : 3*(y+1)*w]
		o := y * w
		for x := 0; x < w; x++ {
			sx := x
			if flip {
				sx = w - 1 - x
			}
			p := row[3*sx : 3*sx+3 : 3*sx+3]
			r[o+x] = t[0][p[0]]
			g[o+x] = t[1][p[1]]
			b[o+x] = t[2][p[2]]
		}
	}
	return dst
}

// Transform is the CLIP image transform: resize the shorter side to Size,
// center crop Size×Size, normalise with Mean and Std. Augment instead draws a
// random resized crop and a horizontal flip (the training transform).
// A Transform is a value; its methods are safe for concurrent use.
type Transform struct {
	Size      int
	Mean, Std [3]float32
	// Interp is the resampling filter (Bicubic for CLIP; Bilinear for the
	// reference code's CIFAR pipeline).
	Interp Interp
	// Scale and Ratio bound RandomResizedCrop's area fraction and aspect
	// ratio; zero values mean torchvision's defaults (0.08, 1) and (3/4, 4/3).
	Scale, Ratio [2]float64
	// FlipP is the horizontal flip probability of Augment; negative disables
	// flipping, zero means 0.5.
	FlipP float64
}

// CLIPTransform returns CLIP's evaluation/training transform at size.
func CLIPTransform(size int) Transform {
	return Transform{Size: size, Mean: CLIPMean, Std: CLIPStd, Interp: Bicubic}
}

// CIFARTransform returns the reference code's CIFAR transform at size:
// bilinear resize and CIFAR statistics.
func CIFARTransform(size int) Transform {
	return Transform{Size: size, Mean: CIFARMean, Std: CIFARStd, Interp: Bilinear}
}

// Len is the number of floats one transformed image has: 3·Size·Size.
func (t Transform) Len() int { return 3 * t.Size * t.Size }

// Eval applies the evaluation transform to img and returns [3,Size,Size]
// float32 data. It follows clip.load's preprocess order (resize, crop, then
// convert("RGB")): an image with transparency is resized premultiplied, as
// PIL resizes mode RGBA/LA, and its alpha dropped afterwards; a paletted image
// (PIL mode "P", or "1" from Decode) has its indices resized with NEAREST, the
// filter PIL forces for those modes, before its palette is applied; a CMYK
// image is resized in CMYK and then converted. It returns nil
// for a nil or empty image or a Size ≤ 0.
func (t Transform) Eval(img image.Image) []float32 {
	out, err := t.EvalInto(img, nil)
	if err != nil {
		return nil
	}
	return out
}

// EvalInto is Eval writing into dst when it has room; it reports why an image
// cannot be transformed.
func (t Transform) EvalInto(img image.Image, dst []float32) ([]float32, error) {
	if t.Size <= 0 {
		return nil, fmt.Errorf("preprocess: transform size %d", t.Size)
	}
	if img == nil {
		return nil, fmt.Errorf("preprocess: nil image")
	}
	if b := img.Bounds(); b.Dx() <= 0 || b.Dy() <= 0 {
		return nil, fmt.Errorf("preprocess: empty image %dx%d", b.Dx(), b.Dy())
	}
	switch m := img.(type) {
	case *rgbImage:
		return t.EvalRGB(&m.RGB, dst)
	case *image.Paletted:
		// PIL modes "P" and "1": NEAREST on the indices, then the palette.
		return t.evalPaletted(m, dst), nil
	case *image.CMYK:
		return t.evalCMYK(m, dst), nil
	}
	if m := straightAlpha(img); m != nil {
		// CLIP's transform resizes before convert("RGB"): PIL resizes RGBA
		// premultiplied, so transparent pixels do not bleed colour.
		s := t.Size
		w, h := ShorterSideSize(m.Rect.Dx(), m.Rect.Dy(), s)
		x0, y0 := cropOrigin(w, s), cropOrigin(h, s)
		if x0 >= 0 && y0 >= 0 && (w != m.Rect.Dx() || h != m.Rect.Dy()) {
			pix := resampleRGBA(m, w, h, t.Interp, x0, y0, s, s)
			return normalizeInto(pix, s, s, makeLUT(t.Mean, t.Std), false, dst), nil
		}
	}
	return t.EvalRGB(ToRGB(img), dst)
}

// EvalRGB is the evaluation transform of an RGB image (resize shorter side,
// center crop, normalise). Only the cropped window of the resized image is
// computed; the values equal those of a full resize followed by the crop.
func (t Transform) EvalRGB(src *RGB, dst []float32) ([]float32, error) {
	if t.Size <= 0 {
		return nil, fmt.Errorf("preprocess: transform size %d", t.Size)
	}
	if err := src.Validate(); err != nil {
		return nil, err
	}
	s := t.Size
	w, h := ShorterSideSize(src.W, src.H, s)
	var pix []uint8
	if w == src.W && h == src.H {
		pix = src.Crop(cropOrigin(w, s), cropOrigin(h, s), s, s).Pix
	} else {
		x0, y0 := cropOrigin(w, s), cropOrigin(h, s)
		if x0 < 0 || y0 < 0 || x0+s > w || y0+s > h {
			// Cannot happen for a shorter-side resize to s, but stay general.
			pix = CenterCrop(ResizeInterp(src, w, h, t.Interp), s).Pix
		} else {
			pix = resample(src.Pix, src.W, src.H, 3, w, h, t.Interp, x0, y0, s, s)
		}
	}
	return normalizeInto(pix, s, s, makeLUT(t.Mean, t.Std), false, dst), nil
}

// EvalFile decodes the image at path and applies Eval; errors name the file.
func (t Transform) EvalFile(path string) ([]float32, error) {
	img, err := Decode(path)
	if err != nil {
		return nil, err
	}
	out, err := t.EvalInto(img, nil)
	if err != nil {
		return nil, fmt.Errorf("preprocess %s: %w", path, err)
	}
	return out, nil
}

// CropBox is a crop rectangle: top-left corner (X, Y) and size W×H.
type CropBox struct{ X, Y, W, H int }

// RandomResizedCropBox draws the crop of an imgW×imgH image with torchvision
// 0.14's RandomResizedCrop.get_params: up to 10 attempts of a target area
// area·U(scale) and a log-uniform aspect ratio, w = round(sqrt(area·ratio)),
// h = round(sqrt(area/ratio)) (half to even), accepted when it fits, with a
// uniformly drawn integer offset; otherwise a center crop of the whole image
// with its ratio clamped into the allowed range.
func RandomResizedCropBox(imgW, imgH int, scale, ratio [2]float64, rng *rand.Rand) CropBox {
	area := float64(imgW * imgH)
	logR0, logR1 := math.Log(ratio[0]), math.Log(ratio[1])
	for range 10 {
		target := area * (scale[0] + rng.Float64()*(scale[1]-scale[0]))
		ar := math.Exp(logR0 + rng.Float64()*(logR1-logR0))
		w := int(math.RoundToEven(math.Sqrt(target * ar)))
		h := int(math.RoundToEven(math.Sqrt(target / ar)))
		if w > 0 && w <= imgW && h > 0 && h <= imgH {
			y := rng.IntN(imgH - h + 1)
			x := rng.IntN(imgW - w + 1)
			return CropBox{X: x, Y: y, W: w, H: h}
		}
	}
	inRatio := float64(imgW) / float64(imgH)
	w, h := imgW, imgH
	switch lo, hi := min(ratio[0], ratio[1]), max(ratio[0], ratio[1]); {
	case inRatio < lo:
		h = int(math.RoundToEven(float64(w) / lo))
	case inRatio > hi:
		w = int(math.RoundToEven(float64(h) * hi))
	}
	return CropBox{X: (imgW - w) / 2, Y: (imgH - h) / 2, W: w, H: h}
}

// params returns the augmentation parameters with defaults filled in.
func (t Transform) params() (scale, ratio [2]float64, flipP float64) {
	scale, ratio, flipP = t.Scale, t.Ratio, t.FlipP
	if scale == ([2]float64{}) {
		scale = [2]float64{0.08, 1}
	}
	if ratio == ([2]float64{}) {
		ratio = [2]float64{3.0 / 4.0, 4.0 / 3.0}
	}
	if flipP == 0 {
		flipP = 0.5
	}
	return scale, ratio, max(flipP, 0)
}

// Augment applies the training transform to img: torchvision's
// RandomResizedCrop(Size, Scale, Ratio, Interp), RandomHorizontalFlip(FlipP)
// and normalisation, drawing from rng (crop first, then the flip). Alpha is
// dropped before cropping, as the reference trainer's image reader converts
// to RGB on load. It returns nil for a nil or empty image, Size ≤ 0 or a nil
// rng.
func (t Transform) Augment(img image.Image, rng *rand.Rand) []float32 {
	if img == nil {
		return nil
	}
	out, err := t.AugmentRGB(ToRGB(img), rng, nil)
	if err != nil {
		return nil
	}
	return out
}

// AugmentRGB is Augment for an RGB image, writing into dst when it has room.
func (t Transform) AugmentRGB(src *RGB, rng *rand.Rand, dst []float32) ([]float32, error) {
	if t.Size <= 0 {
		return nil, fmt.Errorf("preprocess: transform size %d", t.Size)
	}
	if rng == nil {
		return nil, fmt.Errorf("preprocess: nil random source")
	}
	if err := src.Validate(); err != nil {
		return nil, err
	}
	scale, ratio, flipP := t.params()
	box := RandomResizedCropBox(src.W, src.H, scale, ratio, rng)
	flip := rng.Float64() < flipP
	crop := src.Crop(box.X, box.Y, box.W, box.H)
	s := t.Size
	pix := resample(crop.Pix, crop.W, crop.H, 3, s, s, t.Interp, 0, 0, s, s)
	return normalizeInto(pix, s, s, makeLUT(t.Mean, t.Std), flip, dst), nil
}
