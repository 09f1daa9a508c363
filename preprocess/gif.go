package preprocess

import (
	"image"
	"image/color"
)

// gifFirstFrame reads what PIL keeps of a GIF's first frame and Go's decoder
// does not: the colour table that frame uses (RGB triples) and its
// transparent index (-1 without one). ok is false when the stream cannot be
// walked up to the first image descriptor.
func gifFirstFrame(data []byte) (table []byte, trans int, ok bool) {
	if len(data) < 13 {
		return nil, -1, false
	}
	trans = -1
	p := 13
	if flags := data[10]; flags&0x80 != 0 {
		n := 3 << (flags&7 + 1)
		if p+n > len(data) {
			return nil, -1, false
		}
		table = data[p : p+n]
		p += n
	}
	for p < len(data) {
		switch data[p] {
		case 0x21: // extension: label, then sub-blocks
			if p+2 > len(data) {
				return nil, -1, false
			}
			label := data[p+1]
			p += 2
			if label == 0xf9 && p+5 <= len(data) && data[p] == 4 {
				if data[p+1]&1 != 0 {
					trans = int(data[p+4])
				} else {
					trans = -1
				}
			}
			for p < len(data) && data[p] != 0 {
				p += 1 + int(data[p])
			}
			p++
		case 0x2c: // image descriptor
			if p+10 > len(data) {
				return nil, -1, false
			}
			if flags := data[p+9]; flags&0x80 != 0 {
				n := 3 << (flags&7 + 1)
				if p+10+n > len(data) {
					return nil, -1, false
				}
				table = data[p+10 : p+10+n]
			}
			return table, trans, true
		default:
			return nil, -1, false
		}
	}
	return nil, -1, false
}

// gifAsPIL turns the first frame Go decoded from a GIF into the "P" image PIL
// opens: the transparent entry keeps its colour from the colour table (Go
// replaces it by transparent black, while PIL's convert("RGB") uses the
// colour), and a frame smaller than the logical screen (w×h) is placed on a
// screen-sized canvas filled with the transparent index, or 0 without one.
func gifAsPIL(m *image.Paletted, data []byte, w, h int) *image.Paletted {
	table, trans, ok := gifFirstFrame(data)
	if !ok {
		return m
	}
	if trans >= 0 && trans < len(m.Palette) && 3*trans+2 < len(table) {
		pal := append(color.Palette(nil), m.Palette...)
		pal[trans] = color.NRGBA{table[3*trans], table[3*trans+1], table[3*trans+2], 0}
		m.Palette = pal
	}
	screen := image.Rect(0, 0, w, h)
	if m.Rect == screen || w <= 0 || h <= 0 {
		return m
	}
	out := image.NewPaletted(screen, m.Palette)
	if trans > 0 && trans < 256 {
		for i := range out.Pix {
			out.Pix[i] = uint8(trans)
		}
	}
	r := m.Rect.Intersect(screen)
	for y := r.Min.Y; y < r.Max.Y; y++ {
		copy(out.Pix[out.PixOffset(r.Min.X, y):out.PixOffset(r.Max.X, y)], m.Pix[m.PixOffset(r.Min.X, y):])
	}
	return out
}
