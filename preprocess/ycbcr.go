package preprocess

import "image"

// libjpeg-turbo's Y'CbCr -> RGB tables (jdcolor.c, SCALEBITS 16).
var (
	crR, cbB [256]int32
	crG, cbG [256]int32
)

func init() {
	const (
		scaleBits = 16
		oneHalf   = 1 << (scaleBits - 1)
	)
	fix := func(x float64) int32 { return int32(x*(1<<scaleBits) + 0.5) }
	for i := range 256 {
		x := int32(i - 128)
		crR[i] = (fix(1.40200)*x + oneHalf) >> scaleBits
		cbB[i] = (fix(1.77200)*x + oneHalf) >> scaleBits
		crG[i] = -fix(0.71414) * x
		cbG[i] = -fix(0.34414)*x + oneHalf
	}
}

func clamp8(v int32) uint8 {
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// ycc converts one JFIF Y'CbCr sample to RGB exactly as libjpeg-turbo does.
func ycc(y, cb, cr uint8) (r, g, b uint8) {
	yy := int32(y)
	return clamp8(yy + crR[cr]), clamp8(yy + ((cbG[cb] + crG[cr]) >> 16)), clamp8(yy + cbB[cb])
}

// ycbcrToRGB writes src into out (same size), upsampling chroma with
// libjpeg-turbo's default "fancy" (triangle) filters for 4:2:0, 4:2:2 and
// 4:4:0 and by replication otherwise, then converting with libjpeg's tables.
func ycbcrToRGB(src *image.YCbCr, out *RGB) {
	w, h := out.W, out.H
	b := src.Rect
	hs, vs := 1, 1 // horizontal / vertical chroma subsampling factors
	switch src.SubsampleRatio {
	case image.YCbCrSubsampleRatio444:
	case image.YCbCrSubsampleRatio422:
		hs = 2
	case image.YCbCrSubsampleRatio420:
		hs, vs = 2, 2
	case image.YCbCrSubsampleRatio440:
		vs = 2
	default:
		hs, vs = 0, 0 // 4:1:1, 4:1:0: replicate
	}
	if hs == 0 || b.Min.X%2 != 0 || b.Min.Y%2 != 0 {
		// Nearest-neighbour chroma through the image package's own indexing.
		for y := 0; y < h; y++ {
			orow := out.Pix[3*y*w:]
			for x := 0; x < w; x++ {
				yi := src.YOffset(x+b.Min.X, y+b.Min.Y)
				ci := src.COffset(x+b.Min.X, y+b.Min.Y)
				orow[3*x], orow[3*x+1], orow[3*x+2] = ycc(src.Y[yi], src.Cb[ci], src.Cr[ci])
			}
		}
		return
	}
	// Chroma plane geometry as libjpeg sees it: ceil(W/hs) × ceil(H/vs) samples.
	cw, ch := (w+hs-1)/hs, (h+vs-1)/vs
	c0 := src.COffset(b.Min.X, b.Min.Y)
	cbRow := make([]uint8, cw*hs+2)
	crRow := make([]uint8, cw*hs+2)
	for y := 0; y < h; y++ {
		upsampleRow(src.Cb[c0:], src.CStride, cw, ch, hs, vs, y, cbRow)
		upsampleRow(src.Cr[c0:], src.CStride, cw, ch, hs, vs, y, crRow)
		yrow := src.Y[src.YOffset(b.Min.X, b.Min.Y+y):]
		orow := out.Pix[3*y*w:]
		for x := 0; x < w; x++ {
			orow[3*x], orow[3*x+1], orow[3*x+2] = ycc(yrow[x], cbRow[x], crRow[x])
		}
	}
}

// upsampleRow writes output row y of a chroma plane (cw × ch samples, row
// stride stride) upsampled by hs × vs into dst (at least cw*hs long), following
// libjpeg-turbo's jdsample.c: h2v1_fancy_upsample, h1v2_fancy_upsample and
// h2v2_fancy_upsample, with the image's edge rows replicated as context rows
// (jdmainct.c) and plain replication where libjpeg does not use fancy
// upsampling (planes at most 2 samples wide).
func upsampleRow(plane []uint8, stride, cw, ch, hs, vs, y int, dst []uint8) {
	in := y / vs
	row0 := plane[in*stride : in*stride+cw]
	if hs == 1 && vs == 1 {
		copy(dst, row0)
		return
	}
	if cw <= 2 { // libjpeg's do_fancy needs downsampled_width > 2
		for x := 0; x < cw; x++ {
			for k := 0; k < hs; k++ {
				dst[hs*x+k] = row0[x]
			}
		}
		return
	}
	if vs == 1 { // h2v1
		v := int(row0[0])
		dst[0] = uint8(v)
		dst[1] = uint8((v*3 + int(row0[1]) + 2) >> 2)
		for x := 1; x < cw-1; x++ {
			v := int(row0[x]) * 3
			dst[2*x] = uint8((v + int(row0[x-1]) + 1) >> 2)
			dst[2*x+1] = uint8((v + int(row0[x+1]) + 2) >> 2)
		}
		v = int(row0[cw-1])
		dst[2*cw-2] = uint8((v*3 + int(row0[cw-2]) + 1) >> 2)
		dst[2*cw-1] = uint8(v)
		return
	}
	// Vertical 2×: the nearer row weighs 3, the further (above for even output
	// rows, below for odd ones; edge rows replicated) weighs 1.
	nb := in - 1
	if y%2 == 1 {
		nb = in + 1
	}
	nb = min(max(nb, 0), ch-1)
	row1 := plane[nb*stride : nb*stride+cw]
	if hs == 1 { // h1v2
		bias := 1
		if y%2 == 1 {
			bias = 2
		}
		for x := 0; x < cw; x++ {
			dst[x] = uint8((int(row0[x])*3 + int(row1[x]) + bias) >> 2)
		}
		return
	}
	// h2v2
	this := int(row0[0])*3 + int(row1[0])
	next := int(row0[1])*3 + int(row1[1])
	dst[0] = uint8((this*4 + 8) >> 4)
	dst[1] = uint8((this*3 + next + 7) >> 4)
	last := this
	this = next
	for x := 1; x < cw-1; x++ {
		next = int(row0[x+1])*3 + int(row1[x+1])
		dst[2*x] = uint8((this*3 + last + 8) >> 4)
		dst[2*x+1] = uint8((this*3 + next + 7) >> 4)
		last, this = this, next
	}
	dst[2*cw-2] = uint8((this*3 + last + 8) >> 4)
	dst[2*cw-1] = uint8((this*4 + 7) >> 4)
}
