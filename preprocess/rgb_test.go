package preprocess

import (
	"bytes"
	"image"
	"image/color"
	"testing"
)

func TestToRGB(t *testing.T) {
	rect := image.Rect(0, 0, 2, 1)
	nrgba := image.NewNRGBA(rect)
	copy(nrgba.Pix, []uint8{10, 20, 30, 0, 40, 50, 60, 128})
	rgba := image.NewRGBA(rect)
	copy(rgba.Pix, []uint8{10, 20, 30, 255, 64, 32, 0, 128})
	gray := image.NewGray(rect)
	copy(gray.Pix, []uint8{7, 200})
	gray16 := image.NewGray16(rect)
	copy(gray16.Pix, []uint8{0x00, 0x64, 0x12, 0x34}) // 100 and 0x1234 (clips to 255)
	pal := image.NewPaletted(rect, color.Palette{color.NRGBA{1, 2, 3, 0}, color.RGBA{9, 8, 7, 255}})
	copy(pal.Pix, []uint8{1, 0})
	cmyk := image.NewCMYK(rect)
	copy(cmyk.Pix, []uint8{0, 0, 0, 0, 255, 128, 0, 100})
	nrgba64 := image.NewNRGBA64(rect)
	copy(nrgba64.Pix, []uint8{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0, 0, 0xff, 0xff, 0, 0, 0x80, 0x01, 0x00, 0x00})
	tests := []struct {
		name string
		img  image.Image
		want []uint8
	}{
		{"nrgba drops alpha", nrgba, []uint8{10, 20, 30, 40, 50, 60}},
		{"rgba unpremultiplies", rgba, []uint8{10, 20, 30, 127, 63, 0}},
		{"gray replicates", gray, []uint8{7, 7, 7, 200, 200, 200}},
		{"gray16 clips like PIL I", gray16, []uint8{100, 100, 100, 255, 255, 255}},
		{"palette expands", pal, []uint8{9, 8, 7, 1, 2, 3}},
		// PIL cmyk2rgb: MULDIV255(255-c, 255-k); 255-100 = 155: 127*155/255 = 77.2 -> 77.
		{"cmyk like PIL", cmyk, []uint8{255, 255, 255, 0, 77, 155}},
		{"nrgba64 high byte", nrgba64, []uint8{0x12, 0x56, 0x9a, 0xff, 0x00, 0x80}},
		{"subimage", nrgba.SubImage(image.Rect(1, 0, 2, 1)), []uint8{40, 50, 60}},
	}
	for _, tc := range tests {
		got := ToRGB(tc.img)
		if err := got.Validate(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !bytes.Equal(got.Pix, tc.want) {
			t.Errorf("%s: got %v want %v", tc.name, got.Pix, tc.want)
		}
	}
	if m := ToRGB(nil); m.W != 0 || len(m.Pix) != 0 {
		t.Error("nil image did not give an empty RGB")
	}
}

func TestFlipHAndCrop(t *testing.T) {
	m := &RGB{W: 3, H: 2, Pix: []uint8{
		1, 1, 1, 2, 2, 2, 3, 3, 3,
		4, 4, 4, 5, 5, 5, 6, 6, 6,
	}}
	if got := m.FlipH().Pix; !bytes.Equal(got, []uint8{3, 3, 3, 2, 2, 2, 1, 1, 1, 6, 6, 6, 5, 5, 5, 4, 4, 4}) {
		t.Errorf("FlipH = %v", got)
	}
	if got := m.Crop(1, 1, 2, 2).Pix; !bytes.Equal(got, []uint8{5, 5, 5, 6, 6, 6, 0, 0, 0, 0, 0, 0}) {
		t.Errorf("Crop = %v", got)
	}
}

// TestYCbCrToRGBMatchesLibjpeg checks colour conversion against libjpeg's
// formula in floating point (its tables are exact to ±1) and the fancy
// upsampling weights on a hand-made 4:2:0 image.
func TestYCbCrToRGBMatchesLibjpeg(t *testing.T) {
	for _, c := range [][3]uint8{{0, 128, 128}, {255, 128, 128}, {100, 0, 255}, {50, 255, 0}, {128, 90, 170}} {
		r, g, b := ycc(c[0], c[1], c[2])
		y, cb, cr := float64(c[0]), float64(c[1])-128, float64(c[2])-128
		want := []float64{y + 1.402*cr, y - 0.34414*cb - 0.71414*cr, y + 1.772*cb}
		for i, v := range []uint8{r, g, b} {
			w := min(max(want[i], 0), 255)
			if d := float64(v) - w; d > 1 || d < -1 {
				t.Errorf("ycc(%v) channel %d = %d, want ≈ %.2f", c, i, v, w)
			}
		}
	}
	// A 6×4 4:2:0 image with Y = 128 and a Cb ramp 0, 60, 120 per chroma row.
	img := image.NewYCbCr(image.Rect(0, 0, 6, 4), image.YCbCrSubsampleRatio420)
	for i := range img.Y {
		img.Y[i] = 128
	}
	for cy := 0; cy < 2; cy++ {
		for cx := 0; cx < 3; cx++ {
			img.Cb[cy*img.CStride+cx] = uint8(60 * cx)
			img.Cr[cy*img.CStride+cx] = 128
		}
	}
	row := make([]uint8, 8)
	upsampleRow(img.Cb, img.CStride, 3, 2, 2, 2, 0, row)
	// h2v2 (libjpeg's h2v2_fancy_upsample): both rows equal, so the column
	// sums are 4·Cb = 0, 240, 480; outputs (4·0+8)>>4, (0+240+7)>>4,
	// (720+0+8)>>4, (720+480+7)>>4, (1440+240+8)>>4, (1920+7)>>4.
	want := []uint8{0, 15, 45, 75, 105, 120}
	if !bytes.Equal(row[:6], want) {
		t.Errorf("h2v2 row = %v want %v", row[:6], want)
	}
	out := ToRGB(img)
	for x := 0; x < 6; x++ {
		_, _, b := out.At(x, 1)
		_, _, wantB := ycc(128, want[x], 128)
		if b != wantB {
			t.Errorf("pixel %d blue = %d want %d", x, b, wantB)
		}
	}
}

func TestWebPConversion(t *testing.T) {
	// VP8 is BT.601 limited range: Y 16..235, chroma centred at 128.
	for _, c := range [][3]int{{16, 128, 128}, {235, 128, 128}, {81, 90, 240}, {145, 54, 34}, {41, 240, 110}} {
		r, g, b := webpYUVToRGB(c[0], c[1], c[2])
		y, u, v := 1.164*(float64(c[0])-16), float64(c[1])-128, float64(c[2])-128
		want := []float64{y + 1.596*v, y - 0.391*u - 0.813*v, y + 2.018*u}
		for i, got := range []uint8{r, g, b} {
			w := min(max(want[i], 0), 255)
			if d := float64(got) - w; d > 1.5 || d < -1.5 {
				t.Errorf("yuv %v channel %d = %d, want ≈ %.1f", c, i, got, w)
			}
		}
	}
	// Constant chroma must upsample to itself at every size.
	for _, sz := range [][2]int{{1, 1}, {2, 2}, {5, 3}, {6, 4}, {7, 7}} {
		img := image.NewYCbCr(image.Rect(0, 0, sz[0], sz[1]), image.YCbCrSubsampleRatio420)
		for i := range img.Y {
			img.Y[i] = 120
		}
		for i := range img.Cb {
			img.Cb[i], img.Cr[i] = 100, 160
		}
		m := webpToRGBA(img).(*image.NRGBA)
		r, g, b := webpYUVToRGB(120, 100, 160)
		for i := 0; i < len(m.Pix); i += 4 {
			if m.Pix[i] != r || m.Pix[i+1] != g || m.Pix[i+2] != b || m.Pix[i+3] != 255 {
				t.Fatalf("size %v: pixel %d = %v want %d,%d,%d,255", sz, i/4, m.Pix[i:i+4], r, g, b)
			}
		}
	}
}
