package preprocess

import (
	"math"
	"sync"
)

// Interp selects the resampling filter.
type Interp int

const (
	// Bicubic is PIL's BICUBIC filter (Keys cubic, a = -0.5, support 2).
	Bicubic Interp = iota
	// Bilinear is PIL's BILINEAR filter (triangle, support 1).
	Bilinear
)

// String returns the filter's name.
func (i Interp) String() string {
	switch i {
	case Bicubic:
		return "bicubic"
	case Bilinear:
		return "bilinear"
	}
	return "unknown"
}

// precisionBits is PIL's PRECISION_BITS for 8-bit resampling (Resample.c):
// coefficients are fixed point with 22 fractional bits.
const precisionBits = 32 - 8 - 2

// support returns the filter's half-width in source pixels at scale 1.
func (i Interp) support() float64 {
	if i == Bilinear {
		return 1
	}
	return 2
}

// eval evaluates the filter at x. Products are rounded explicitly (float64
// conversions) so that no fused multiply-add changes the result from PIL's.
func (i Interp) eval(x float64) float64 {
	if x < 0 {
		x = -x
	}
	if i == Bilinear {
		if x < 1 {
			return 1 - x
		}
		return 0
	}
	const a = -0.5
	if x < 1 {
		return float64(float64(float64((a+2)*x)-(a+3))*x)*x + 1
	}
	if x < 2 {
		return float64(float64(float64(float64((x-5)*x)+8)*x)-4) * a
	}
	return 0
}

// coeffs is PIL's precomputed 1-D resampling table for one (in, out, filter):
// output sample i reads input samples start[i] .. start[i]+n[i]-1 with the
// fixed-point weights k[i*ksize : i*ksize+n[i]].
type coeffs struct {
	ksize int
	start []int
	n     []int
	k     []int32
}

type coeffKey struct {
	in, out int
	interp  Interp
}

var coeffCache sync.Map // coeffKey -> *coeffs

// getCoeffs returns the cached table for resampling in samples to out samples.
func getCoeffs(in, out int, interp Interp) *coeffs {
	key := coeffKey{in, out, interp}
	if c, ok := coeffCache.Load(key); ok {
		return c.(*coeffs)
	}
	c := precomputeCoeffs(in, out, interp)
	coeffCache.Store(key, c)
	return c
}

// precomputeCoeffs follows PIL's precompute_coeffs and normalize_coeffs_8bpc
// (Resample.c, Pillow 9) for the box (0, in): when downscaling, the filter is
// stretched by the scale factor (antialiasing); weights are normalised to sum
// 1 in float64 and then rounded half away from zero to 22-bit fixed point.
func precomputeCoeffs(in, out int, interp Interp) *coeffs {
	scale := float64(in) / float64(out)
	filterscale := max(scale, 1)
	support := interp.support() * filterscale
	ksize := int(math.Ceil(support))*2 + 1
	c := &coeffs{ksize: ksize, start: make([]int, out), n: make([]int, out), k: make([]int32, out*ksize)}
	w := make([]float64, ksize)
	ss := 1 / filterscale
	for xx := 0; xx < out; xx++ {
		center := (float64(xx) + 0.5) * scale
		xmin := max(int(center-support+0.5), 0)
		xmax := min(int(center+support+0.5), in) - xmin
		xmax = max(xmax, 0)
		ww := 0.0
		for x := 0; x < xmax; x++ {
			v := interp.eval(float64(float64(x+xmin)-center+0.5) * ss)
			w[x] = v
			ww += v
		}
		for x := 0; x < xmax; x++ {
			v := w[x]
			if ww != 0 {
				v /= ww
			}
			f := v * (1 << precisionBits)
			if v < 0 {
				c.k[xx*ksize+x] = int32(-0.5 + f)
			} else {
				c.k[xx*ksize+x] = int32(0.5 + f)
			}
		}
		c.start[xx], c.n[xx] = xmin, xmax
	}
	return c
}

// clip8 is PIL's clip8: the fixed-point accumulator back to 0..255.
func clip8(v int32) uint8 {
	if v >= 1<<precisionBits<<8 {
		return 255
	}
	if v <= 0 {
		return 0
	}
	return uint8(v >> precisionBits)
}

// resample is PIL's ImagingResample for an 8-bit interleaved image with nc
// channels (src is sw×sh), resizing to w×h, but computing only the output
// window [x0, x0+cw) × [y0, y0+ch). The result (cw×ch) equals that window cut
// from the full resize, because every output sample depends only on its own
// coefficient row. Like PIL it runs a horizontal pass (rounded and clipped to
// 8 bits) and then a vertical pass, skipping a pass whose size is unchanged.
func resample(src []uint8, sw, sh, nc, w, h int, interp Interp, x0, y0, cw, ch int) []uint8 {
	needH := w != sw
	needV := h != sh
	// Rows of the source that the vertical pass reads for the window.
	ry0, ry1 := y0, y0+ch
	var cv *coeffs
	if needV {
		cv = getCoeffs(sh, h, interp)
		ry0 = cv.start[y0]
		ry1 = cv.start[y0+ch-1] + cv.n[y0+ch-1]
		for y := y0; y < y0+ch; y++ { // bounds are not monotone at the edges
			ry0 = min(ry0, cv.start[y])
			ry1 = max(ry1, cv.start[y]+cv.n[y])
		}
	}
	// Horizontal pass: rows ry0..ry1 of the source, columns x0..x0+cw of the output.
	tmpW := cw
	var tmp []uint8
	if needH {
		chz := getCoeffs(sw, w, interp)
		tmp = make([]uint8, (ry1-ry0)*cw*nc)
		horizontal(tmp, src, sw, nc, ry0, ry1, chz, x0, cw)
	} else {
		tmp = make([]uint8, (ry1-ry0)*cw*nc)
		for y := ry0; y < ry1; y++ {
			copy(tmp[(y-ry0)*cw*nc:(y-ry0+1)*cw*nc], src[(y*sw+x0)*nc:(y*sw+x0+cw)*nc])
		}
	}
	if !needV {
		return tmp
	}
	out := make([]uint8, cw*ch*nc)
	vertical(out, tmp, tmpW*nc, ry0, cv, y0, ch)
	return out
}

// horizontal resamples source rows y0..y1 (src has width sw, nc channels)
// into dst (cw output columns starting at output column x0 per row).
func horizontal(dst, src []uint8, sw, nc, y0, y1 int, c *coeffs, x0, cw int) {
	const half = 1 << (precisionBits - 1)
	for y := y0; y < y1; y++ {
		row := src[y*sw*nc : (y+1)*sw*nc]
		orow := dst[(y-y0)*cw*nc : (y-y0+1)*cw*nc]
		for xx := 0; xx < cw; xx++ {
			start, n := c.start[x0+xx], c.n[x0+xx]
			k := c.k[(x0+xx)*c.ksize : (x0+xx)*c.ksize+n]
			in := row[start*nc : (start+n)*nc]
			switch nc {
			case 3:
				var s0, s1, s2 int32 = half, half, half
				for i, kv := range k {
					p := in[3*i : 3*i+3 : 3*i+3]
					s0 += int32(p[0]) * kv
					s1 += int32(p[1]) * kv
					s2 += int32(p[2]) * kv
				}
				o := orow[3*xx : 3*xx+3 : 3*xx+3]
				o[0], o[1], o[2] = clip8(s0), clip8(s1), clip8(s2)
			default:
				for ci := 0; ci < nc; ci++ {
					var s int32 = half
					for i, kv := range k {
						s += int32(in[nc*i+ci]) * kv
					}
					orow[nc*xx+ci] = clip8(s)
				}
			}
		}
	}
}

// vertical resamples the rows of tmp (rowLen bytes each, first row = source
// row ry0) into dst rows for output rows y0..y0+ch.
func vertical(dst, tmp []uint8, rowLen, ry0 int, c *coeffs, y0, ch int) {
	const half = 1 << (precisionBits - 1)
	acc := make([]int32, rowLen)
	for yy := 0; yy < ch; yy++ {
		start, n := c.start[y0+yy], c.n[y0+yy]
		k := c.k[(y0+yy)*c.ksize : (y0+yy)*c.ksize+n]
		for i := range acc {
			acc[i] = half
		}
		for t, kv := range k {
			r := tmp[(start+t-ry0)*rowLen : (start+t-ry0+1)*rowLen]
			r = r[:len(acc)]
			for i, p := range r {
				acc[i] += int32(p) * kv
			}
		}
		orow := dst[yy*rowLen : (yy+1)*rowLen]
		for i, v := range acc {
			orow[i] = clip8(v)
		}
	}
}

// Resize resizes src to w×h with PIL's antialiased bicubic filter, as
// PIL's Image.resize((w, h), BICUBIC) does for an 8-bit RGB image. It returns
// nil when src is empty or w, h are not positive.
func Resize(src *RGB, w, h int) *RGB {
	return ResizeInterp(src, w, h, Bicubic)
}

// ResizeInterp is Resize with a chosen filter.
func ResizeInterp(src *RGB, w, h int, interp Interp) *RGB {
	if src.Validate() != nil || w <= 0 || h <= 0 {
		return nil
	}
	return &RGB{W: w, H: h, Pix: resample(src.Pix, src.W, src.H, 3, w, h, interp, 0, 0, w, h)}
}

// ShorterSideSize returns the size torchvision's Resize(size) gives an image
// of w×h: the shorter side becomes size, the longer int(size·long/short)
// (truncated, computed in float64 as Python does).
func ShorterSideSize(w, h, size int) (nw, nh int) {
	if w <= h {
		return size, int(float64(size*h) / float64(w))
	}
	return int(float64(size*w) / float64(h)), size
}

// ResizeShorter resizes src so that its shorter side is size (torchvision
// Resize(size, BICUBIC) on a PIL image).
func ResizeShorter(src *RGB, size int) *RGB {
	if src.Validate() != nil || size <= 0 {
		return nil
	}
	w, h := ShorterSideSize(src.W, src.H, size)
	if w == src.W && h == src.H {
		return &RGB{W: w, H: h, Pix: append([]uint8(nil), src.Pix...)}
	}
	return Resize(src, w, h)
}

// CenterCropOffset is torchvision's center-crop offset for cropping crop
// pixels out of n: int(round((n - crop) / 2)), rounding half to even.
func CenterCropOffset(n, crop int) int {
	return int(math.RoundToEven(float64(n-crop) / 2))
}

// CenterCrop cuts the central size×size square out of src, as torchvision's
// CenterCrop(size) does; a side shorter than size is first padded with black
// the way torchvision pads (left/top get the smaller half).
func CenterCrop(src *RGB, size int) *RGB {
	if src.Validate() != nil || size <= 0 {
		return nil
	}
	x0, y0 := cropOrigin(src.W, size), cropOrigin(src.H, size)
	return src.Crop(x0, y0, size, size)
}

// cropOrigin is the first source index of a center crop of crop out of n,
// including torchvision's padding rule when crop > n.
func cropOrigin(n, crop int) int {
	if crop <= n {
		return CenterCropOffset(n, crop)
	}
	pad0 := (crop - n) / 2
	padded := n + pad0 + (crop-n+1)/2
	return CenterCropOffset(padded, crop) - pad0
}
