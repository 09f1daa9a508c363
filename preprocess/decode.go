package preprocess

import (
	"bytes"
	"fmt"
	"image"
	_ "image/gif"  // GIF decoder for image.Decode
	_ "image/jpeg" // JPEG decoder for image.Decode
	_ "image/png"  // PNG decoder for image.Decode
	"io"
	"os"

	_ "golang.org/x/image/bmp" // BMP decoder for image.Decode
	"golang.org/x/image/webp"
)

// Decode reads and decodes the image file at path (JPEG, PNG, GIF — first
// frame —, BMP or WebP). Errors name the file. Lossy WebP is converted to RGB
// here with libwebp's own upsampling and BT.601 limited-range conversion, the
// colours PIL gets from libwebp, since the x/image decoder leaves the raw
// (video-range) Y'CbCr planes that Go would otherwise read as JFIF.
func Decode(path string) (image.Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("preprocess: %w", err)
	}
	defer f.Close()
	img, err := DecodeReader(f)
	if err != nil {
		return nil, fmt.Errorf("preprocess %s: %w", path, err)
	}
	return img, nil
}

// MaxPixels bounds the width·height an image header may announce; larger
// images are refused before their pixels are allocated.
var MaxPixels = 1 << 27

// DecodeReader decodes an image from r as Decode does.
func DecodeReader(r io.Reader) (img image.Image, err error) {
	defer func() {
		// The decoders are meant not to panic on corrupt input; this keeps a
		// decoder bug on hostile data from taking a long run down.
		if p := recover(); p != nil {
			img, err = nil, fmt.Errorf("decoder panic: %v", p)
		}
	}()
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || cfg.Width > MaxPixels/max(cfg.Height, 1) {
		return nil, fmt.Errorf("%s: image size %dx%d out of range (MaxPixels %d)", format, cfg.Width, cfg.Height, MaxPixels)
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
		return nil, fmt.Errorf("decode: %w", err)
	}
	if b := m.Bounds(); b.Dx() <= 0 || b.Dy() <= 0 {
		return nil, fmt.Errorf("%s: empty image %dx%d", format, b.Dx(), b.Dy())
	}
	return m, nil
}

// DecodeRGB reads the image file at path and converts it to RGB.
func DecodeRGB(path string) (*RGB, error) {
	img, err := Decode(path)
	if err != nil {
		return nil, err
	}
	return ToRGB(img), nil
}
