package preprocess

import "image"

// webpToRGBA converts a decoded lossy WebP (Y'CbCr 4:2:0, optionally with
// alpha) to straight-alpha RGBA as libwebp's WebPDecodeRGBA does: "fancy"
// upsampling of the chroma (dsp/upsampling.c) and the 14-bit fixed-point
// BT.601 limited-range conversion of dsp/yuv.h. Other images are returned
// unchanged.
func webpToRGBA(m image.Image) image.Image {
	var (
		ycc   *image.YCbCr
		alpha []uint8
		astr  int
	)
	switch v := m.(type) {
	case *image.YCbCr:
		ycc = v
	case *image.NYCbCrA:
		ycc, alpha, astr = &v.YCbCr, v.A, v.AStride
	default:
		return m
	}
	if ycc.SubsampleRatio != image.YCbCrSubsampleRatio420 || ycc.Rect.Min != (image.Point{}) {
		return m
	}
	w, h := ycc.Rect.Dx(), ycc.Rect.Dy()
	out := image.NewNRGBA(image.Rect(0, 0, w, h))
	uv := func(row int) ([]uint8, []uint8) {
		o := row * ycc.CStride
		return ycc.Cb[o:], ycc.Cr[o:]
	}
	put := func(y int, topU, topV, curU, curV []uint8, bottom bool) {
		// Row y of the output uses chroma rows top (weight 3 if !bottom) and cur.
		if bottom {
			topU, curU = curU, topU
			topV, curV = curV, topV
		}
		webpUpsampleRow(ycc.Y[y*ycc.YStride:], topU, topV, curU, curV, out.Pix[y*out.Stride:], w)
	}
	// libwebp's EmitFancyRGB: row 0 mirrors its chroma row; rows 2k-1 and 2k
	// blend chroma rows k-1 and k; the last row of an even height mirrors.
	u0, v0 := uv(0)
	put(0, u0, v0, u0, v0, false)
	for k := 1; 2*k-1 < h; k++ {
		tu, tv := uv(k - 1)
		if 2*k < h {
			cu, cv := uv(k)
			put(2*k-1, tu, tv, cu, cv, false)
			put(2*k, tu, tv, cu, cv, true)
		} else {
			put(2*k-1, tu, tv, tu, tv, false)
		}
	}
	for y := 0; y < h; y++ {
		row := out.Pix[y*out.Stride:]
		for x := 0; x < w; x++ {
			a := uint8(0xff)
			if alpha != nil {
				a = alpha[y*astr+x]
			}
			row[4*x+3] = a
		}
	}
	return out
}

// webpUpsampleRow is one output row of libwebp's UPSAMPLE_FUNC: horizontal
// and vertical 3:1 blending of the "near" chroma row (near) and the "far" one.
func webpUpsampleRow(y, nearU, nearV, farU, farV, dst []uint8, w int) {
	lastPair := (w - 1) >> 1
	px := func(x int, u, v uint32) {
		r, g, b := webpYUVToRGB(int(y[x]), int(u), int(v))
		dst[4*x], dst[4*x+1], dst[4*x+2] = r, g, b
	}
	// For the top row of a pair libwebp computes (3*tl + l + 2) >> 2 etc.;
	// near/far generalise "top/cur" so one routine serves both rows.
	nl := uint32(nearU[0]) | uint32(nearV[0])<<16
	fl := uint32(farU[0]) | uint32(farV[0])<<16
	uv0 := (3*nl + fl + 0x00020002) >> 2
	px(0, uv0&0xff, (uv0>>16)&0xff)
	for x := 1; x <= lastPair; x++ {
		n := uint32(nearU[x]) | uint32(nearV[x])<<16
		f := uint32(farU[x]) | uint32(farV[x])<<16
		avg := nl + n + fl + f + 0x00080008
		diag12 := (avg + 2*(n+fl)) >> 3 // weights near-right and far-left
		diag03 := (avg + 2*(nl+f)) >> 3
		a := (diag12 + nl) >> 1
		b := (diag03 + n) >> 1
		px(2*x-1, a&0xff, (a>>16)&0xff)
		px(2*x, b&0xff, (b>>16)&0xff)
		nl, fl = n, f
	}
	if w&1 == 0 {
		uv := (3*nl + fl + 0x00020002) >> 2
		px(w-1, uv&0xff, (uv>>16)&0xff)
	}
}

// webpYUVToRGB is libwebp's VP8YuvToRgb (dsp/yuv.h, non-table version).
func webpYUVToRGB(y, u, v int) (r, g, b uint8) {
	multHi := func(v, c int) int { return (v * c) >> 8 }
	clip := func(v int) uint8 {
		const mask = (256 << 6) - 1
		if v&^mask == 0 {
			return uint8(v >> 6)
		}
		if v < 0 {
			return 0
		}
		return 255
	}
	r = clip(multHi(y, 19077) + multHi(v, 26149) - 14234)
	g = clip(multHi(y, 19077) - multHi(u, 6419) - multHi(v, 13320) + 8708)
	b = clip(multHi(y, 19077) + multHi(u, 33050) - 17685)
	return
}
