package preprocess

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNormalizeMatchesFloat32Formula(t *testing.T) {
	src := randomRGB(5, 4, 7)
	got := Normalize(src, CLIPMean, CLIPStd, nil)
	if len(got) != 3*5*4 {
		t.Fatalf("len = %d", len(got))
	}
	for c := 0; c < 3; c++ {
		for i := 0; i < 20; i++ {
			v := float32(src.Pix[3*i+c]) / 255
			want := (v - CLIPMean[c]) / CLIPStd[c]
			if g := got[c*20+i]; g != want {
				t.Fatalf("channel %d pixel %d = %v want %v", c, i, g, want)
			}
		}
	}
	buf := make([]float32, 100)
	if out := Normalize(src, CLIPMean, CLIPStd, buf); &out[0] != &buf[0] || len(out) != 60 {
		t.Error("Normalize did not reuse a large enough dst")
	}
}

func TestRandomResizedCropBoxBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	scale, ratio := [2]float64{0.08, 1}, [2]float64{3.0 / 4, 4.0 / 3}
	fallbacks := 0
	for trial := 0; trial < 3000; trial++ {
		w, h := 1+rng.IntN(400), 1+rng.IntN(400)
		if trial%10 == 0 {
			w = 1 + rng.IntN(4) // tiny and extreme shapes exercise the fallback
		}
		b := RandomResizedCropBox(w, h, scale, ratio, rng)
		if b.W <= 0 || b.H <= 0 || b.X < 0 || b.Y < 0 || b.X+b.W > w || b.Y+b.H > h {
			t.Fatalf("image %dx%d: crop %+v out of bounds", w, h, b)
		}
		area := float64(b.W * b.H)
		ar := float64(b.W) / float64(b.H)
		full := float64(w * h)
		// Rounding w and h to integers can move area and ratio a little.
		slack := 2*math.Sqrt(area) + 1
		inRange := area >= scale[0]*full-slack && area <= full+slack &&
			ar >= ratio[0]*(1-2/float64(b.H))-1e-9 && ar <= ratio[1]*(1+2/float64(b.H))+1e-9
		if !inRange {
			// Only the fallback center crop may break the sampled ranges, and it is centred.
			fallbacks++
			if b.X != (w-b.W)/2 || b.Y != (h-b.H)/2 {
				t.Fatalf("image %dx%d: crop %+v outside the sampled ranges and not centred", w, h, b)
			}
		}
	}
	// Fallback for a very wide image: ratio clamped to 4/3, full height, centred.
	b := RandomResizedCropBox(1000, 10, scale, ratio, rand.New(rand.NewPCG(3, 4)))
	if b != (CropBox{X: 493, Y: 0, W: 13, H: 10}) {
		t.Errorf("wide fallback = %+v want {493 0 13 10}", b)
	}
	b = RandomResizedCropBox(10, 1000, scale, ratio, rand.New(rand.NewPCG(3, 4)))
	if b != (CropBox{X: 0, Y: 493, W: 10, H: 13}) { // round(10 / 0.75) = 13
		t.Errorf("tall fallback = %+v want {0 493 10 13}", b)
	}
}

func TestAugmentDeterministicShapeAndFlip(t *testing.T) {
	img := randomRGB(97, 61, 9).Image()
	tr := CLIPTransform(32)
	a := tr.Augment(img, rand.New(rand.NewPCG(42, 0)))
	b := tr.Augment(img, rand.New(rand.NewPCG(42, 0)))
	c := tr.Augment(img, rand.New(rand.NewPCG(43, 0)))
	if len(a) != tr.Len() {
		t.Fatalf("len = %d want %d", len(a), tr.Len())
	}
	if !equalF32(a, b) {
		t.Error("same seed gave different outputs")
	}
	if equalF32(a, c) {
		t.Error("different seeds gave identical outputs")
	}
	// FlipP 1 and "never" draw the same crop (the flip draw is made either
	// way), so the outputs must be mirror images.
	always, never := tr, tr
	always.FlipP, never.FlipP = 1, -1
	for seed := uint64(0); seed < 5; seed++ {
		f := always.Augment(img, rand.New(rand.NewPCG(seed, 5)))
		n := never.Augment(img, rand.New(rand.NewPCG(seed, 5)))
		s := tr.Size
		for ch := 0; ch < 3; ch++ {
			for y := 0; y < s; y++ {
				for x := 0; x < s; x++ {
					if f[ch*s*s+y*s+x] != n[ch*s*s+y*s+s-1-x] {
						t.Fatalf("seed %d: flipped output is not the mirror of the unflipped one", seed)
					}
				}
			}
		}
	}
	// The unflipped augmented output equals resizing the drawn crop.
	rng := rand.New(rand.NewPCG(7, 7))
	got := never.Augment(img, rng)
	rng = rand.New(rand.NewPCG(7, 7))
	box := RandomResizedCropBox(97, 61, [2]float64{0.08, 1}, [2]float64{3.0 / 4, 4.0 / 3}, rng)
	want := Normalize(Resize(ToRGB(img).Crop(box.X, box.Y, box.W, box.H), 32, 32), CLIPMean, CLIPStd, nil)
	if !equalF32(got, want) {
		t.Error("Augment differs from crop + resize + normalise")
	}
	if tr.Augment(nil, rng) != nil || tr.Augment(img, nil) != nil {
		t.Error("nil input did not give nil")
	}
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestEvalEqualsStepByStep(t *testing.T) {
	for _, tr := range []Transform{CLIPTransform(24), CIFARTransform(24)} {
		for _, sz := range [][2]int{{64, 48}, {20, 30}, {24, 24}, {24, 50}, {301, 7}} {
			src := randomRGB(sz[0], sz[1], 11)
			got := tr.Eval(src.Image())
			w, h := ShorterSideSize(sz[0], sz[1], 24)
			want := Normalize(CenterCrop(ResizeInterp(src, w, h, tr.Interp), 24), tr.Mean, tr.Std, nil)
			if !equalF32(got, want) {
				t.Errorf("%v %v: Eval differs from resize + crop + normalise", tr.Interp, sz)
			}
		}
	}
	if CLIPTransform(24).Eval(nil) != nil || (Transform{}).Eval(randomRGB(4, 4, 1).Image()) != nil {
		t.Error("nil image or zero size did not give nil")
	}
	if CLIPTransform(24).Eval(image.NewRGBA(image.Rect(0, 0, 0, 5))) != nil {
		t.Error("empty image did not give nil")
	}
}

func TestDecodeErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	var pngBuf bytes.Buffer
	if err := png.Encode(&pngBuf, randomRGB(20, 20, 3).Image()); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"truncated.png": pngBuf.Bytes()[:pngBuf.Len()/2],
		"random.jpg":    []byte("\x13\x37 definitely not an image \x00\xff"),
		"empty.png":     nil,
		"fake.webp":     []byte("RIFF\x10\x00\x00\x00WEBPVP8 \x04\x00\x00\x00\x00\x00\x00\x00"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files["missing.png"] = nil
	tr := CLIPTransform(16)
	for name := range files {
		path := filepath.Join(dir, name)
		if name == "missing.png" {
			os.Remove(path)
		}
		_, err := tr.EvalFile(path)
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error %q does not name the file", name, err)
		}
		if name == "missing.png" && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("missing file error %q does not wrap ErrNotExist", err)
		}
	}
	// A whole PNG decodes.
	path := filepath.Join(dir, "ok.png")
	if err := os.WriteFile(path, pngBuf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := tr.EvalFile(path); err != nil || len(out) != tr.Len() {
		t.Errorf("valid PNG: len %d, err %v", len(out), err)
	}
	// Images larger than MaxPixels are refused before decoding.
	old := MaxPixels
	MaxPixels = 399
	defer func() { MaxPixels = old }()
	if _, err := tr.EvalFile(path); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("20x20 image with MaxPixels 399: err %v", err)
	}
}

func FuzzDecodeEval(f *testing.F) {
	var buf bytes.Buffer
	if err := png.Encode(&buf, randomRGB(5, 3, 1).Image()); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte("GIF89a"))
	f.Add([]byte("RIFF\x00\x00\x00\x00WEBPVP8 "))
	tr := CLIPTransform(8)
	f.Fuzz(func(t *testing.T, data []byte) {
		img, err := DecodeReader(bytes.NewReader(data))
		if err != nil {
			return
		}
		if b := img.Bounds(); b.Dx()*b.Dy() > 1<<20 {
			return // keep the fuzzer fast
		}
		if out := tr.Eval(img); len(out) != tr.Len() {
			t.Fatalf("decoded image gave %d values", len(out))
		}
	})
}

func TestEvalFiles(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	tr := CLIPTransform(12)
	var want [][]float32
	for i := range 5 {
		img := randomRGB(20+i, 15, uint64(i))
		var buf bytes.Buffer
		if err := png.Encode(&buf, img.Image()); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, fmt.Sprintf("img%d.png", i))
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
		want = append(want, tr.Eval(img.Image()))
	}
	got, err := tr.EvalFiles(context.Background(), paths, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if !equalF32(got[i], want[i]) {
			t.Errorf("image %d out of order or wrong", i)
		}
	}
	bad := append(append([]string(nil), paths...), filepath.Join(dir, "nope.png"))
	if _, err := tr.EvalFiles(context.Background(), bad, 2); err == nil || !strings.Contains(err.Error(), "nope.png") {
		t.Errorf("missing file: err %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tr.EvalFiles(ctx, paths, 2); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: err %v", err)
	}
}
