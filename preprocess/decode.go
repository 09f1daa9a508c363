package preprocess

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/gif" // GIF decoder for image.Decode
	_ "image/png" // PNG decoder for image.Decode
	"io"

	_ "golang.org/x/image/bmp" // BMP decoder for image.Decode
	"golang.org/x/image/webp"

	"github.com/pfedmma/pfedmma/internal/inputfile"
)

// Decode reads and decodes the image file at path (JPEG, PNG, GIF — first
// frame —, BMP or WebP) as PIL's Image.open and load would, refusing an image
// whose header announces more than MaxPixels pixels before its pixels are
// allocated. Errors name the file. It is the one image-open function of the
// project: every image read for training or evaluation should go through it
// (or DecodeReader).
//
// What it returns, by what PIL would see:
//   - JPEG: decoded by libjpeg-turbo with PIL's settings in the default cgo
//     build (see JPEGDecoder); 1-component → *image.Gray ("L"), 3 → RGB
//     (an opaque image that ToRGB and Transform read without conversion),
//     4 → *image.CMYK ("CMYK", PIL's inverted Adobe convention).
//   - PNG: palette → *image.Paletted ("P"); 1-bit gray without transparency
//     → *image.Paletted with the palette {black, white} (PIL mode "1"),
//     other gray depths → *image.Gray ("L"); others as image/png decodes them.
//   - GIF: the first frame, *image.Paletted ("P") on the logical screen
//     (filled with the transparent index, else 0, around a smaller frame),
//     the transparent entry keeping its colour from the colour table.
//   - Lossy WebP is converted to RGB with libwebp's own upsampling and BT.601
//     limited-range conversion, the colours PIL gets from libwebp, since the
//     x/image decoder leaves the raw (video-range) Y'CbCr planes that Go would
//     otherwise read as JFIF.
//
// Transform.EvalInto resizes *image.Paletted images (modes "P" and "1") with
// PIL's NEAREST filter before converting them to RGB, as PIL does.
//
// Only regular files are read (a FIFO, a device such as /dev/zero or a
// folder is refused before it is opened), of at most MaxFileBytes.
func Decode(path string) (image.Image, error) {
	f, err := inputfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("preprocess: image %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > MaxFileBytes {
		return nil, fmt.Errorf("preprocess %s: %d bytes, over the limit of %d for an image file", path, st.Size(), MaxFileBytes)
	}
	img, err := DecodeReader(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("preprocess %s: %w", path, err)
	}
	return img, nil
}

// MaxFileBytes bounds the size of an image file Decode reads (a BMP of
// MaxPixels 32-bit pixels is 512 MiB).
const MaxFileBytes = 1 << 30

// MaxPixels bounds the width·height an image header may announce; larger
// images are refused before their pixels are allocated.
var MaxPixels = 1 << 27

// checkSize refuses a header size of zero or beyond MaxPixels.
func checkSize(format string, w, h int) error {
	if w <= 0 || h <= 0 || w > MaxPixels/h {
		return fmt.Errorf("%s: image size %dx%d out of range (at most %d pixels)", format, w, h, MaxPixels)
	}
	return nil
}

// DecodeReader decodes an image from r as Decode does; its errors do not name
// a file (Decode adds the path).
func DecodeReader(r io.Reader) (image.Image, error) {
	img, _, err := DecodeFormat(r)
	return img, err
}

// DecodeFormat is DecodeReader returning the format name too ("jpeg", "png",
// "gif", "bmp", "webp"): it has image.Decode's signature, so it can replace
// image.Decode wherever a decoder function is configured.
func DecodeFormat(r io.Reader) (image.Image, string, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, "", fmt.Errorf("read: %w", err)
	}
	img, err := decodeBytes(data)
	if err != nil {
		return nil, "", err
	}
	return img, sniffFormat(data), nil
}

// sniffFormat names the format of a file that decoded.
func sniffFormat(data []byte) string {
	if len(data) >= 2 && data[0] == 0xff && data[1] == 0xd8 {
		return "jpeg"
	}
	_, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return ""
	}
	return format
}

// decodeBytes decodes a whole image file held in data.
func decodeBytes(data []byte) (img image.Image, err error) {
	defer func() {
		// The decoders are meant not to panic on corrupt input; this keeps a
		// decoder bug on hostile data from taking a long run down.
		if p := recover(); p != nil {
			img, err = nil, fmt.Errorf("decoder panic: %v", p)
		}
	}()
	if len(data) == 0 {
		return nil, errors.New("decode: empty file")
	}
	if len(data) >= 2 && data[0] == 0xff && data[1] == 0xd8 {
		return decodeJPEG(data)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if err := checkSize(format, cfg.Width, cfg.Height); err != nil {
		return nil, err
	}
	if format == "webp" {
		m, err := webp.Decode(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("webp: %w", err)
		}
		return webpToRGBA(m), nil
	}
	m, format, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", format, err)
	}
	if b := m.Bounds(); b.Dx() <= 0 || b.Dy() <= 0 {
		return nil, fmt.Errorf("%s: empty image %dx%d", format, b.Dx(), b.Dy())
	}
	if p, ok := m.(*image.Paletted); ok && format == "gif" {
		return gifAsPIL(p, data, cfg.Width, cfg.Height), nil
	}
	if g, ok := m.(*image.Gray); ok && format == "png" && pngBilevel(data) {
		return bilevel(g), nil
	}
	return m, nil
}

// pngBilevel reports whether a PNG's header declares 1-bit grayscale, which
// PIL opens as mode "1".
func pngBilevel(data []byte) bool {
	// 8-byte signature, chunk length, "IHDR", width, height, bit depth, colour type.
	return len(data) >= 26 && string(data[12:16]) == "IHDR" &&
		binary.BigEndian.Uint32(data[8:12]) >= 13 && data[24] == 1 && data[25] == 0
}

// bilevel turns a 1-bit grayscale image (values 0 and 255) into a paletted
// image with the palette {black, white}, so that it is resized as PIL resizes
// mode "1": NEAREST, before the conversion to RGB.
func bilevel(g *image.Gray) *image.Paletted {
	b := g.Bounds()
	out := image.NewPaletted(image.Rect(0, 0, b.Dx(), b.Dy()), color.Palette{color.Gray{0}, color.Gray{255}})
	for y := 0; y < b.Dy(); y++ {
		row := g.Pix[g.PixOffset(b.Min.X, b.Min.Y+y):][:b.Dx()]
		orow := out.Pix[y*out.Stride:][:b.Dx()]
		for x, v := range row {
			orow[x] = v >> 7
		}
	}
	return out
}

// DecodeRGB reads the image file at path and converts it to RGB
// (Image.convert("RGB") after opening, without resizing).
func DecodeRGB(path string) (*RGB, error) {
	img, err := Decode(path)
	if err != nil {
		return nil, err
	}
	if m, ok := img.(*rgbImage); ok {
		return &m.RGB, nil
	}
	return ToRGB(img), nil
}
