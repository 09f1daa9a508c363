// Package preprocess turns image files into the normalised float32 tensors that
// CLIP's vision encoder takes, reproducing torchvision 0.14 on PIL images
// (Pillow 9.x) pixel for pixel: PIL's 8-bit fixed-point bicubic resampling,
// torchvision's resize, center crop and random resized crop, and PIL's
// conversions of gray, palette, alpha and CMYK images to RGB, in PIL's order
// (palette and bi-level images resized with NEAREST before their palette is
// applied, CMYK resized in CMYK).
//
// Images are opened with Decode (or DecodeReader, DecodeFormat), which checks
// the header's size against MaxPixels before decoding. JPEG is decoded by
// libjpeg-turbo through cgo with PIL's settings (islow IDCT, fancy
// upsampling), bit-exact with PIL; the purego build (-tags purego or
// CGO_ENABLED=0) uses Go's image/jpeg instead, a level or more off on many
// pixels. JPEGDecoder names the decoder in use.
//
// The pipeline works on RGB, a compact interleaved 8-bit image; float32 data
// only appears in the last step (Normalize), which writes the [3,H,W] layout
// PyTorch uses.
package preprocess

import (
	"fmt"
	"image"
	"image/color"
)

// RGB is an 8-bit RGB image stored row-major and interleaved: the red, green and
// blue values of pixel (x, y) are Pix[3*(y*W+x)+0..2].
type RGB struct {
	W, H int
	Pix  []uint8
}

// NewRGB returns a black w×h image.
func NewRGB(w, h int) *RGB {
	return &RGB{W: w, H: h, Pix: make([]uint8, 3*w*h)}
}

// At returns the red, green and blue values of pixel (x, y).
func (m *RGB) At(x, y int) (r, g, b uint8) {
	i := 3 * (y*m.W + x)
	return m.Pix[i], m.Pix[i+1], m.Pix[i+2]
}

// Validate reports whether the dimensions and the pixel buffer agree.
func (m *RGB) Validate() error {
	if m == nil {
		return fmt.Errorf("preprocess: nil image")
	}
	if m.W <= 0 || m.H <= 0 {
		return fmt.Errorf("preprocess: empty image %dx%d", m.W, m.H)
	}
	if len(m.Pix) != 3*m.W*m.H {
		return fmt.Errorf("preprocess: image %dx%d needs %d bytes, has %d", m.W, m.H, 3*m.W*m.H, len(m.Pix))
	}
	return nil
}

// Image returns m as a standard library image (a copy, opaque).
func (m *RGB) Image() *image.NRGBA {
	out := image.NewNRGBA(image.Rect(0, 0, m.W, m.H))
	for i, j := 0, 0; i < len(m.Pix); i, j = i+3, j+4 {
		out.Pix[j], out.Pix[j+1], out.Pix[j+2], out.Pix[j+3] = m.Pix[i], m.Pix[i+1], m.Pix[i+2], 0xff
	}
	return out
}

// Crop returns a copy of the w×h region of m whose top-left corner is (x, y).
// Parts of the region outside m are black, as with PIL's Image.crop.
func (m *RGB) Crop(x, y, w, h int) *RGB {
	out := NewRGB(w, h)
	for oy := 0; oy < h; oy++ {
		sy := y + oy
		if sy < 0 || sy >= m.H {
			continue
		}
		x0, x1 := max(x, 0), min(x+w, m.W)
		if x0 >= x1 {
			continue
		}
		copy(out.Pix[3*(oy*w+x0-x):], m.Pix[3*(sy*m.W+x0):3*(sy*m.W+x1)])
	}
	return out
}

// FlipH returns m mirrored left to right.
func (m *RGB) FlipH() *RGB {
	out := NewRGB(m.W, m.H)
	for y := 0; y < m.H; y++ {
		row := m.Pix[3*y*m.W : 3*(y+1)*m.W]
		orow := out.Pix[3*y*m.W : 3*(y+1)*m.W]
		for x := 0; x < m.W; x++ {
			j := 3 * (m.W - 1 - x)
			orow[3*x], orow[3*x+1], orow[3*x+2] = row[j], row[j+1], row[j+2]
		}
	}
	return out
}

// ToRGB converts any image to 8-bit RGB the way PIL's Image.convert("RGB")
// does for the image PIL would have decoded from the same file:
//   - alpha is dropped, not blended (the straight, un-premultiplied colour is kept);
//   - gray is replicated into the three channels;
//   - palette images take their palette colours (alpha ignored);
//   - 16-bit images keep the high byte (PIL's 16-bit PNG RGB/RGBA unpackers),
//     except 16-bit gray, which PIL opens as 32-bit "I" and clips to 0..255 on
//     conversion — reproduced here so results match the reference;
//   - CMYK uses PIL's cmyk2rgb (MULDIV255(255-c, 255-k));
//   - Y'CbCr (JPEG) is upsampled and converted like libjpeg-turbo's default
//     decoder (fancy upsampling, ISLOW fixed-point colour tables).
//
// A nil or empty image gives an empty RGB.
func ToRGB(img image.Image) *RGB {
	if img == nil {
		return &RGB{}
	}
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	if w <= 0 || h <= 0 {
		return &RGB{}
	}
	out := NewRGB(w, h)
	switch src := img.(type) {
	case *rgbImage:
		copy(out.Pix, src.Pix)
	case *image.RGBA:
		rgbaToRGB(src, b, out)
	case *image.NRGBA:
		nrgbaToRGB(src, b, out)
	case *image.Gray:
		grayToRGB(src, b, out)
	case *image.Gray16:
		gray16ToRGB(src, b, out)
	case *image.Paletted:
		palettedToRGB(src, b, out)
	case *image.CMYK:
		cmykToRGB(src, b, out)
	case *image.YCbCr:
		ycbcrToRGB(src, out)
	case *image.NYCbCrA:
		ycbcrToRGB(&src.YCbCr, out)
	default:
		for y := 0; y < h; y++ {
			orow := out.Pix[3*y*w:]
			for x := 0; x < w; x++ {
				p := straightRGB(img.At(x+b.Min.X, y+b.Min.Y))
				orow[3*x], orow[3*x+1], orow[3*x+2] = p[0], p[1], p[2]
			}
		}
	}
	return out
}

// rgbaToRGB copies an RGBA image, un-premultiplying its translucent
// pixels.
func rgbaToRGB(src *image.RGBA, b image.Rectangle, out *RGB) {
	w, h := b.Dx(), b.Dy()
	for y := 0; y < h; y++ {
		row := src.Pix[(y+b.Min.Y-src.Rect.Min.Y)*src.Stride+(b.Min.X-src.Rect.Min.X)*4:]
		orow := out.Pix[3*y*w:]
		for x := 0; x < w; x++ {
			r, g, bb, a := row[4*x], row[4*x+1], row[4*x+2], row[4*x+3]
			if a != 0xff {
				c := color.NRGBAModel.Convert(color.RGBA{r, g, bb, a}).(color.NRGBA)
				r, g, bb = c.R, c.G, c.B
			}
			orow[3*x], orow[3*x+1], orow[3*x+2] = r, g, bb
		}
	}
}

// nrgbaToRGB copies an NRGBA image, dropping alpha.
func nrgbaToRGB(src *image.NRGBA, b image.Rectangle, out *RGB) {
	w, h := b.Dx(), b.Dy()
	for y := 0; y < h; y++ {
		row := src.Pix[(y+b.Min.Y-src.Rect.Min.Y)*src.Stride+(b.Min.X-src.Rect.Min.X)*4:]
		orow := out.Pix[3*y*w:]
		for x := 0; x < w; x++ {
			orow[3*x], orow[3*x+1], orow[3*x+2] = row[4*x], row[4*x+1], row[4*x+2]
		}
	}
}

// grayToRGB repeats a gray image in the three channels.
func grayToRGB(src *image.Gray, b image.Rectangle, out *RGB) {
	w, h := b.Dx(), b.Dy()
	for y := 0; y < h; y++ {
		row := src.Pix[(y+b.Min.Y-src.Rect.Min.Y)*src.Stride+(b.Min.X-src.Rect.Min.X):]
		orow := out.Pix[3*y*w:]
		for x := 0; x < w; x++ {
			v := row[x]
			orow[3*x], orow[3*x+1], orow[3*x+2] = v, v, v
		}
	}
}

// gray16ToRGB repeats a 16-bit gray image in the three channels, clipped
// at 255 as PIL does.
func gray16ToRGB(src *image.Gray16, b image.Rectangle, out *RGB) {
	w, h := b.Dx(), b.Dy()
	for y := 0; y < h; y++ {
		orow := out.Pix[3*y*w:]
		for x := 0; x < w; x++ {
			v := src.Gray16At(x+b.Min.X, y+b.Min.Y).Y
			c := uint8(min(v, 255)) // PIL "I" -> "RGB" clips, it does not rescale
			orow[3*x], orow[3*x+1], orow[3*x+2] = c, c, c
		}
	}
}

// palettedToRGB looks a paletted image's pixels up in its palette.
func palettedToRGB(src *image.Paletted, b image.Rectangle, out *RGB) {
	w, h := b.Dx(), b.Dy()
	pal := make([][3]uint8, 256)
	for i, c := range src.Palette {
		if i >= 256 {
			break
		}
		pal[i] = straightRGB(c)
	}
	for y := 0; y < h; y++ {
		row := src.Pix[(y+b.Min.Y-src.Rect.Min.Y)*src.Stride+(b.Min.X-src.Rect.Min.X):]
		orow := out.Pix[3*y*w:]
		for x := 0; x < w; x++ {
			p := pal[row[x]]
			orow[3*x], orow[3*x+1], orow[3*x+2] = p[0], p[1], p[2]
		}
	}
}

// cmykToRGB converts a CMYK image as PIL does.
func cmykToRGB(src *image.CMYK, b image.Rectangle, out *RGB) {
	w, h := b.Dx(), b.Dy()
	for y := 0; y < h; y++ {
		row := src.Pix[(y+b.Min.Y-src.Rect.Min.Y)*src.Stride+(b.Min.X-src.Rect.Min.X)*4:]
		orow := out.Pix[3*y*w:]
		for x := 0; x < w; x++ {
			k := 255 - uint32(row[4*x+3])
			orow[3*x] = mulDiv255(255-uint32(row[4*x]), k)
			orow[3*x+1] = mulDiv255(255-uint32(row[4*x+1]), k)
			orow[3*x+2] = mulDiv255(255-uint32(row[4*x+2]), k)
		}
	}
}

// straightRGB returns the un-premultiplied 8-bit colour of c (its high bytes).
func straightRGB(c color.Color) [3]uint8 {
	switch c := c.(type) {
	case color.NRGBA:
		return [3]uint8{c.R, c.G, c.B}
	case color.NRGBA64:
		return [3]uint8{uint8(c.R >> 8), uint8(c.G >> 8), uint8(c.B >> 8)}
	case color.Gray:
		return [3]uint8{c.Y, c.Y, c.Y}
	}
	n := color.NRGBA64Model.Convert(c).(color.NRGBA64)
	return [3]uint8{uint8(n.R >> 8), uint8(n.G >> 8), uint8(n.B >> 8)}
}

// mulDiv255 is PIL's MULDIV255: round(a*b/255) for a, b in 0..255.
func mulDiv255(a, b uint32) uint8 {
	t := a*b + 128
	return uint8(((t >> 8) + t) >> 8)
}
