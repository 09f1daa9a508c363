package preprocess

import (
	"image"
	"image/color"
)

// rgbImage is a decoded opaque 8-bit RGB image (PIL mode "RGB"), as the JPEG
// decoder produces it; ToRGB and Transform read it without conversion.
type rgbImage struct{ RGB }

// ColorModel returns color.RGBAModel.
func (m *rgbImage) ColorModel() color.Model { return color.RGBAModel }

// Bounds returns the image rectangle, with origin (0, 0).
func (m *rgbImage) Bounds() image.Rectangle { return image.Rect(0, 0, m.W, m.H) }

// At returns the colour of pixel (x, y), transparent black outside the image.
func (m *rgbImage) At(x, y int) color.Color {
	if x < 0 || y < 0 || x >= m.W || y >= m.H {
		return color.RGBA{}
	}
	r, g, b := m.RGB.At(x, y)
	return color.RGBA{r, g, b, 0xff}
}

// nearestTable returns, for each output sample of a NEAREST resize of in
// samples to out, its source index, or -1 where PIL leaves the fill value. It
// is PIL's ImagingScaleAffine (the path Image.resize takes for NEAREST): the
// position starts at scale/2 and is advanced by scale = in/out in double
// precision, and the index is its truncation.
func nearestTable(in, out int) []int {
	scale := float64(in) / float64(out)
	pos := scale * 0.5
	t := make([]int, out)
	for i := range t {
		xi := -1
		if pos >= 0 {
			xi = int(pos)
		}
		if xi >= in {
			xi = -1
		}
		t[i] = xi
		pos += scale
	}
	return t
}

// evalPaletted is the evaluation transform of a paletted image in PIL's order
// for modes "P" and "1": the palette indices are resized with NEAREST (the
// filter PIL forces for these modes), center cropped, and only then looked up
// in the palette (convert("RGB"), alpha ignored). Pixels PIL's resize or crop
// leaves unfilled take index 0.
func (t Transform) evalPaletted(m *image.Paletted, dst []float32) []float32 {
	b := m.Bounds()
	sw, sh := b.Dx(), b.Dy()
	s := t.Size
	w, h := ShorterSideSize(sw, sh, s)
	x0, y0 := cropOrigin(w, s), cropOrigin(h, s)
	xt, yt := nearestTable(sw, w), nearestTable(sh, h)
	var pal [256][3]uint8
	for i, c := range m.Palette {
		if i >= len(pal) {
			break
		}
		pal[i] = straightRGB(c)
	}
	pix := make([]uint8, 3*s*s)
	for y := range s {
		sy := -1
		if yy := y0 + y; yy >= 0 && yy < h {
			sy = yt[yy]
		}
		orow := pix[3*y*s : 3*(y+1)*s]
		var row []uint8
		if sy >= 0 {
			row = m.Pix[m.PixOffset(b.Min.X, b.Min.Y+sy):][:sw]
		}
		for x := range s {
			idx := uint8(0)
			if xx := x0 + x; sy >= 0 && xx >= 0 && xx < w {
				if sx := xt[xx]; sx >= 0 {
					idx = row[sx]
				}
			}
			p := pal[idx]
			orow[3*x], orow[3*x+1], orow[3*x+2] = p[0], p[1], p[2]
		}
	}
	return normalizeInto(pix, s, s, makeLUT(t.Mean, t.Std), false, dst)
}

// evalCMYK is the evaluation transform of a CMYK image in PIL's order: the
// four channels are resized with the transform's filter and center cropped,
// then converted with PIL's cmyk2rgb.
func (t Transform) evalCMYK(m *image.CMYK, dst []float32) []float32 {
	b := m.Bounds()
	sw, sh := b.Dx(), b.Dy()
	src := m.Pix
	if m.Stride != 4*sw || len(m.Pix) != 4*sw*sh {
		src = make([]uint8, 4*sw*sh)
		for y := range sh {
			copy(src[4*y*sw:4*(y+1)*sw], m.Pix[m.PixOffset(b.Min.X, b.Min.Y+y):])
		}
	}
	s := t.Size
	w, h := ShorterSideSize(sw, sh, s)
	x0, y0 := cropOrigin(w, s), cropOrigin(h, s)
	var win []uint8 // the s×s CMYK window
	if x0 >= 0 && y0 >= 0 && x0+s <= w && y0+s <= h {
		if w == sw && h == sh {
			win = make([]uint8, 4*s*s)
			for y := range s {
				copy(win[4*y*s:4*(y+1)*s], src[4*((y0+y)*sw+x0):])
			}
		} else {
			win = resample(src, sw, sh, 4, w, h, t.Interp, x0, y0, s, s)
		}
	} else {
		// Cannot happen for a shorter-side resize to s; stay general as EvalRGB does.
		full := src
		if w != sw || h != sh {
			full = resample(src, sw, sh, 4, w, h, t.Interp, 0, 0, w, h)
		}
		win = make([]uint8, 4*s*s)
		for y := range s {
			for x := range s {
				if sx, sy := x0+x, y0+y; sx >= 0 && sy >= 0 && sx < w && sy < h {
					copy(win[4*(y*s+x):4*(y*s+x)+4], full[4*(sy*w+sx):])
				} else {
					// torchvision pads with 0, which is white in CMYK terms.
					copy(win[4*(y*s+x):4*(y*s+x)+4], []uint8{0, 0, 0, 0})
				}
			}
		}
	}
	pix := make([]uint8, 3*s*s)
	for i, j := 0, 0; i < len(win); i, j = i+4, j+3 {
		k := 255 - uint32(win[i+3])
		pix[j] = mulDiv255(255-uint32(win[i]), k)
		pix[j+1] = mulDiv255(255-uint32(win[i+1]), k)
		pix[j+2] = mulDiv255(255-uint32(win[i+2]), k)
	}
	return normalizeInto(pix, s, s, makeLUT(t.Mean, t.Std), false, dst)
}
