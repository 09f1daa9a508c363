package preprocess

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// randomRGB returns a w×h image of seeded random pixels.
func randomRGB(w, h int, seed uint64) *RGB {
	rng := rand.New(rand.NewPCG(seed, 1))
	m := NewRGB(w, h)
	for i := range m.Pix {
		m.Pix[i] = uint8(rng.IntN(256))
	}
	return m
}

func TestShorterSideSize(t *testing.T) {
	tests := []struct{ w, h, size, wantW, wantH int }{
		{640, 480, 224, 298, 224}, // 224*640/480 = 298.67 -> 298
		{480, 640, 224, 224, 298},
		{300, 200, 224, 336, 224},
		{333, 500, 224, 224, 336}, // 224*500/333 = 336.34
		{224, 224, 224, 224, 224},
		{150, 100, 224, 336, 224},
		{3, 1000, 224, 224, 74666}, // 74666.67 truncated
		{1000, 999, 224, 224, 224}, // 224.22 -> 224 for the longer side too
	}
	for _, tc := range tests {
		w, h := ShorterSideSize(tc.w, tc.h, tc.size)
		if w != tc.wantW || h != tc.wantH {
			t.Errorf("ShorterSideSize(%d,%d,%d) = %d,%d want %d,%d", tc.w, tc.h, tc.size, w, h, tc.wantW, tc.wantH)
		}
	}
}

func TestCenterCropOffsetRoundsHalfToEven(t *testing.T) {
	tests := []struct{ n, crop, want int }{
		{298, 224, 37},
		{225, 224, 0}, // round(0.5) = 0
		{227, 224, 2}, // round(1.5) = 2
		{229, 224, 2}, // round(2.5) = 2
		{231, 224, 4}, // round(3.5) = 4
		{224, 224, 0},
		{220, 224, -2}, // round(-2) (padding case)
	}
	for _, tc := range tests {
		if got := CenterCropOffset(tc.n, tc.crop); got != tc.want {
			t.Errorf("CenterCropOffset(%d,%d) = %d want %d", tc.n, tc.crop, got, tc.want)
		}
	}
}

func TestCenterCropPadsLikeTorchvision(t *testing.T) {
	src := randomRGB(3, 5, 1)
	got := CenterCrop(src, 6)
	// Width 3 -> pad left 1, right 2; height 5 -> pad top 0, bottom 1; then crop 6 at offset 0.
	for y := 0; y < 6; y++ {
		for x := 0; x < 6; x++ {
			r, g, b := got.At(x, y)
			sx, sy := x-1, y
			if sx < 0 || sx >= 3 || sy >= 5 {
				if r|g|b != 0 {
					t.Fatalf("pixel (%d,%d) = %d,%d,%d, want black padding", x, y, r, g, b)
				}
				continue
			}
			wr, wg, wb := src.At(sx, sy)
			if r != wr || g != wg || b != wb {
				t.Fatalf("pixel (%d,%d) = %d,%d,%d, want %d,%d,%d", x, y, r, g, b, wr, wg, wb)
			}
		}
	}
}

func TestResizeConstantImageStaysConstant(t *testing.T) {
	for _, interp := range []Interp{Bicubic, Bilinear} {
		for _, sz := range [][4]int{{640, 480, 224, 168}, {37, 53, 224, 224}, {224, 224, 7, 300}, {5, 5, 5, 9}} {
			src := NewRGB(sz[0], sz[1])
			for i := range src.Pix {
				src.Pix[i] = []uint8{17, 128, 250}[i%3]
			}
			out := ResizeInterp(src, sz[2], sz[3], interp)
			for i, v := range out.Pix {
				if want := []uint8{17, 128, 250}[i%3]; v != want {
					t.Fatalf("%v %v: byte %d = %d want %d", interp, sz, i, v, want)
				}
			}
		}
	}
}

func TestResizeSameSizeIsIdentity(t *testing.T) {
	src := randomRGB(31, 17, 2)
	if out := Resize(src, 31, 17); !bytes.Equal(out.Pix, src.Pix) {
		t.Fatal("resize to the same size changed pixels")
	}
}

// TestResizeOneAxisUnchanged checks that resizing only one axis filters only
// along that axis (PIL skips the other pass).
func TestResizeOneAxisUnchanged(t *testing.T) {
	src := randomRGB(40, 30, 3)
	out := Resize(src, 40, 13) // vertical only
	col := func(m *RGB, x int) []uint8 {
		c := NewRGB(1, m.H)
		for y := 0; y < m.H; y++ {
			copy(c.Pix[3*y:3*y+3], m.Pix[3*(y*m.W+x):])
		}
		return c.Pix
	}
	for x := 0; x < 40; x++ {
		single := Resize(&RGB{W: 1, H: 30, Pix: col(src, x)}, 1, 13)
		if !bytes.Equal(single.Pix, col(out, x)) {
			t.Fatalf("column %d differs from resizing it alone", x)
		}
	}
}

// TestWindowEqualsFullResize checks the optimisation Eval relies on: computing
// only the crop window equals cutting it out of the full resize.
func TestWindowEqualsFullResize(t *testing.T) {
	tests := []struct{ sw, sh, w, h, x0, y0, cw, ch int }{
		{640, 480, 298, 224, 37, 0, 224, 224},
		{150, 100, 336, 224, 56, 0, 224, 224},
		{333, 500, 224, 336, 0, 56, 224, 224},
		{50, 70, 23, 41, 3, 5, 11, 30},
		{50, 70, 50, 41, 3, 5, 11, 30}, // vertical pass only
		{50, 70, 23, 70, 3, 5, 11, 30}, // horizontal pass only
	}
	for _, interp := range []Interp{Bicubic, Bilinear} {
		for _, tc := range tests {
			src := randomRGB(tc.sw, tc.sh, 4)
			full := ResizeInterp(src, tc.w, tc.h, interp).Crop(tc.x0, tc.y0, tc.cw, tc.ch)
			win := resample(src.Pix, tc.sw, tc.sh, 3, tc.w, tc.h, interp, tc.x0, tc.y0, tc.cw, tc.ch)
			if !bytes.Equal(full.Pix, win) {
				t.Errorf("%v %+v: window differs from full resize", interp, tc)
			}
		}
	}
}

// TestCoeffsMatchPIL checks coefficient tables against values worked out from
// PIL's precompute_coeffs by hand.
func TestCoeffsMatchPIL(t *testing.T) {
	// Upscaling 2 -> 4, bicubic: center of output 0 is 0.25, support 2:
	// xmin = int(0.25-2+0.5) = -1 -> 0, xmax = int(0.25+2+0.5) = 2.
	// Taps at x=0: filter(0+0.5-0.25=0.25), x=1: filter(1.25).
	c := precomputeCoeffs(2, 4, Bicubic)
	if c.start[0] != 0 || c.n[0] != 2 {
		t.Fatalf("bounds of output 0 = %d,%d want 0,2", c.start[0], c.n[0])
	}
	f0, f1 := Bicubic.eval(0.25), Bicubic.eval(1.25)
	want0 := int32(0.5 + f0/(f0+f1)*(1<<22))
	want1 := int32(-0.5 + f1/(f0+f1)*(1<<22))
	if c.k[0] != want0 || c.k[1] != want1 {
		t.Fatalf("weights %d,%d want %d,%d", c.k[0], c.k[1], want0, want1)
	}
	// Keys cubic a=-0.5: known values.
	for _, tc := range []struct{ x, want float64 }{{0, 1}, {1, 0}, {2, 0}, {0.5, 0.5625}, {1.5, -0.0625}, {-0.5, 0.5625}, {3, 0}} {
		if got := Bicubic.eval(tc.x); got != tc.want {
			t.Errorf("bicubic(%g) = %g want %g", tc.x, got, tc.want)
		}
	}
	// Downscaling 8 -> 2: the support stretches to 2*4 = 8, and every row of
	// weights sums to 1 in fixed point up to rounding.
	c = precomputeCoeffs(8, 2, Bicubic)
	if c.ksize != 17 {
		t.Errorf("ksize = %d want 17", c.ksize)
	}
	for i := 0; i < 2; i++ {
		var sum int32
		for _, k := range c.k[i*c.ksize : i*c.ksize+c.n[i]] {
			sum += k
		}
		if d := sum - 1<<22; d < -int32(c.n[i]) || d > int32(c.n[i]) {
			t.Errorf("row %d sums to %d, want 1<<22 ± %d", i, sum, c.n[i])
		}
	}
}

func TestResizeRejectsBadInput(t *testing.T) {
	if Resize(&RGB{W: 2, H: 2, Pix: make([]uint8, 5)}, 4, 4) != nil {
		t.Error("short pixel buffer accepted")
	}
	if Resize(NewRGB(2, 2), 0, 4) != nil {
		t.Error("zero width accepted")
	}
	if ResizeShorter(nil, 10) != nil || CenterCrop(nil, 10) != nil {
		t.Error("nil image accepted")
	}
}
