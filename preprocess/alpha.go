package preprocess

import "image"

// straightAlpha returns img as straight-alpha RGBA bytes when it has a
// non-opaque pixel, or nil when alpha is absent or everywhere 255.
func straightAlpha(img image.Image) *image.NRGBA {
	switch m := img.(type) {
	case *image.NRGBA:
		for y := m.Rect.Min.Y; y < m.Rect.Max.Y; y++ {
			row := m.Pix[(y-m.Rect.Min.Y)*m.Stride : (y-m.Rect.Min.Y)*m.Stride+4*m.Rect.Dx()]
			for i := 3; i < len(row); i += 4 {
				if row[i] != 0xff {
					return m
				}
			}
		}
	case *image.NRGBA64, *image.RGBA, *image.RGBA64, *image.NYCbCrA:
		b := m.Bounds()
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				if _, _, _, a := m.At(x, y).RGBA(); a != 0xffff {
					return toNRGBA(m)
				}
			}
		}
	}
	return nil
}

// toNRGBA copies img into a straight-alpha 8-bit image (high bytes).
func toNRGBA(img image.Image) *image.NRGBA {
	b := img.Bounds()
	out := image.NewNRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	for y := 0; y < b.Dy(); y++ {
		for x := 0; x < b.Dx(); x++ {
			r, g, bb, a := img.At(x+b.Min.X, y+b.Min.Y).RGBA()
			if a != 0 && a != 0xffff { // un-premultiply
				r, g, bb = r*0xffff/a, g*0xffff/a, bb*0xffff/a
			}
			i := out.PixOffset(x, y)
			out.Pix[i], out.Pix[i+1], out.Pix[i+2], out.Pix[i+3] = uint8(r>>8), uint8(g>>8), uint8(bb>>8), uint8(a>>8)
		}
	}
	return out
}

// resampleRGBA resizes a straight-alpha RGBA image as PIL's Image.resize does
// for mode "RGBA" with a non-nearest filter: convert to premultiplied "RGBa"
// (MULDIV255), resample the four channels, convert back to "RGBA" (255·c/a,
// truncated and clipped; a = 0 or 255 left as is). Only the output window
// [x0,x0+cw)×[y0,y0+ch) is computed. It returns the window's RGB bytes with
// alpha dropped — what convert("RGB") keeps.
func resampleRGBA(m *image.NRGBA, w, h int, interp Interp, x0, y0, cw, ch int) []uint8 {
	sw, sh := m.Rect.Dx(), m.Rect.Dy()
	pre := make([]uint8, 4*sw*sh)
	for y := 0; y < sh; y++ {
		row := m.Pix[y*m.Stride : y*m.Stride+4*sw]
		orow := pre[4*y*sw : 4*(y+1)*sw]
		for i := 0; i < len(row); i += 4 {
			a := uint32(row[i+3])
			orow[i] = mulDiv255(uint32(row[i]), a)
			orow[i+1] = mulDiv255(uint32(row[i+1]), a)
			orow[i+2] = mulDiv255(uint32(row[i+2]), a)
			orow[i+3] = row[i+3]
		}
	}
	res := resample(pre, sw, sh, 4, w, h, interp, x0, y0, cw, ch)
	out := make([]uint8, 3*cw*ch)
	for i, j := 0, 0; i < len(res); i, j = i+4, j+3 {
		a := uint32(res[i+3])
		if a == 255 || a == 0 {
			out[j], out[j+1], out[j+2] = res[i], res[i+1], res[i+2]
			continue
		}
		for c := range 3 {
			out[j+c] = uint8(min(255*uint32(res[i+c])/a, 255))
		}
	}
	return out
}
