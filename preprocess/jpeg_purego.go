//go:build !cgo || purego

package preprocess

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"
)

// JPEGExact reports whether JPEG files are decoded bit-exactly as PIL decodes
// them: false in this purego build, which uses Go's image/jpeg (its IDCT
// differs from libjpeg-turbo's islow by a level or more on many pixels).
const JPEGExact = false

// JPEGDecoder names the JPEG decoder this build uses.
func JPEGDecoder() string { return "Go image/jpeg (purego build: not bit-exact with PIL)" }

// decodeJPEG decodes a JPEG file's bytes with Go's image/jpeg after checking
// the header's size against MaxPixels.
func decodeJPEG(data []byte) (image.Image, error) {
	cfg, err := jpeg.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("jpeg: %w", err)
	}
	if err := checkSize("jpeg", cfg.Width, cfg.Height); err != nil {
		return nil, err
	}
	m, err := jpeg.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("jpeg: %w", err)
	}
	return m, nil
}
