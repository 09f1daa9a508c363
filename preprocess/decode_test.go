package preprocess

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"image"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// readFixture reads a file of the shared fixtures.
func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../testdata/preprocess-kinds", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeTemp writes data to a file named name in a temporary directory.
func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// decodeAllocs decodes path and returns the error and the bytes allocated
// meanwhile.
func decodeAllocs(path string) (uint64, error) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Decode(path)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, err
}

func TestJPEGDecoderNamed(t *testing.T) {
	d := JPEGDecoder()
	t.Logf("JPEG decoder: %s", d)
	if JPEGExact != strings.HasPrefix(d, "libjpeg-turbo ") {
		t.Errorf("JPEGExact %v but decoder %q", JPEGExact, d)
	}
	if !JPEGExact && !strings.Contains(d, "not bit-exact") {
		t.Errorf("purego decoder name %q does not say it is not bit-exact", d)
	}
}

// TestDecodeJPEGKinds checks the image types PIL's modes map to.
func TestDecodeJPEGKinds(t *testing.T) {
	for name, gray := range map[string]bool{"gray_q80.jpg": true, "p420_q88.jpg": false, "b422_q70.jpg": false} {
		img, err := DecodeReader(bytes.NewReader(readFixture(t, name)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, isGray := img.(*image.Gray); isGray != gray {
			t.Errorf("%s: decoded as %T, gray %v", name, img, gray)
		}
		if !JPEGExact {
			continue // image/jpeg's Y'CbCr At does not upsample as ToRGB does
		}
		// The RGB fast path and the generic image.Image view agree.
		rgb := ToRGB(img)
		b := img.Bounds()
		for _, p := range []image.Point{{0, 0}, {b.Dx() - 1, b.Dy() - 1}, {b.Dx() / 2, b.Dy() / 3}} {
			r, g, bb, _ := img.At(p.X, p.Y).RGBA()
			r2, g2, b2 := rgb.At(p.X, p.Y)
			if uint8(r>>8) != r2 || uint8(g>>8) != g2 || uint8(bb>>8) != b2 {
				t.Errorf("%s at %v: At %d %d %d, ToRGB %d %d %d", name, p, r>>8, g>>8, bb>>8, r2, g2, b2)
			}
		}
	}
}

// TestTruncatedJPEGIsAnError cuts baseline and progressive files at many
// points: every cut before the last scan ends must give an error naming the
// file (PIL: "image file is truncated"), and nothing may crash.
func TestTruncatedJPEGIsAnError(t *testing.T) {
	for _, name := range []string{"b420_q85.jpg", "p444_q60.jpg", "gray_q80.jpg"} {
		data := readFixture(t, name)
		for _, cut := range []int{1, 2, 3, 20, 200, len(data) / 4, len(data) / 2, len(data) - 300} {
			path := writeTemp(t, "cut.jpg", data[:cut])
			_, err := Decode(path)
			if err == nil {
				t.Errorf("%s cut at %d of %d bytes: no error", name, cut, len(data))
				continue
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("%s cut at %d: error %q does not name the file", name, cut, err)
			}
		}
	}
}

// TestCorruptJPEGDoesNotCrash flips bytes all over a file: libjpeg's errors
// come back as Go errors naming the file, and whatever decodes has the size
// the header announces.
func TestCorruptJPEGDoesNotCrash(t *testing.T) {
	data := readFixture(t, "tiny_q90.jpg")
	rng := rand.New(rand.NewPCG(3, 4))
	errs := 0
	for i := range 300 {
		c := append([]byte(nil), data...)
		for range 1 + i%4 {
			c[2+rng.IntN(len(c)-2)] = byte(rng.IntN(256))
		}
		img, err := DecodeReader(bytes.NewReader(c))
		if err != nil {
			errs++
			if strings.Contains(err.Error(), "panic") {
				t.Fatalf("decoder panicked: %v", err)
			}
			continue
		}
		if b := img.Bounds(); b.Dx()*b.Dy() > MaxPixels || b.Empty() {
			t.Fatalf("corrupt file decoded to %v", b)
		}
	}
	if errs == 0 {
		t.Error("no corruption was reported as an error")
	}
	// A bad header is an error that names the file.
	path := writeTemp(t, "bad.jpg", []byte("\xff\xd8\xff\xc0\x00\x03garbage"))
	if _, err := Decode(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("bad header: err %v", err)
	}
}

// pngWithSize returns a PNG whose IHDR announces w×h 8-bit RGB, followed by
// one tiny IDAT: a decompression bomb as far as the header goes.
func pngWithSize(w, h uint32) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(typ string, data []byte) {
		binary.Write(&b, binary.BigEndian, uint32(len(data)))
		b.WriteString(typ)
		b.Write(data)
		binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(append([]byte(typ), data...)))
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr, w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 2
	chunk("IHDR", ihdr)
	chunk("IDAT", []byte{0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01})
	chunk("IEND", nil)
	return b.Bytes()
}

// jpegWithSize patches the frame header (SOF) of a real JPEG to announce w×h.
func jpegWithSize(t *testing.T, data []byte, w, h uint16) []byte {
	t.Helper()
	c := append([]byte(nil), data...)
	for i := 2; i+9 < len(c); {
		if c[i] != 0xff {
			t.Fatal("no SOF marker found")
		}
		m := c[i+1]
		if m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc {
			binary.BigEndian.PutUint16(c[i+5:], h)
			binary.BigEndian.PutUint16(c[i+7:], w)
			return c
		}
		i += 2 + int(binary.BigEndian.Uint16(c[i+2:]))
	}
	t.Fatal("no SOF marker found")
	return nil
}

// TestDecompressionBombRefused: small files whose headers announce a huge
// image are refused by the header check, before their pixels are allocated.
func TestDecompressionBombRefused(t *testing.T) {
	bombs := map[string][]byte{
		"bomb.png":             pngWithSize(60000, 60000),
		"bomb_baseline.jpg":    jpegWithSize(t, readFixture(t, "b420_q85.jpg"), 60000, 60000),
		"bomb_progressive.jpg": jpegWithSize(t, readFixture(t, "p420_q88.jpg"), 65000, 65000),
	}
	for name, data := range bombs {
		path := writeTemp(t, name, data)
		alloc, err := decodeAllocs(path)
		if err == nil || !strings.Contains(err.Error(), "out of range") || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: err %v, want a size error naming the file", name, err)
		}
		// A full decode would need 10 GB; the header check reads the file only.
		if alloc > 8<<20 {
			t.Errorf("%s: %d bytes allocated before refusing", name, alloc)
		}
	}
	// The limit is MaxPixels, checked on the header for every format.
	old := MaxPixels
	defer func() { MaxPixels = old }()
	MaxPixels = 60 * 45
	for _, name := range []string{"tiny_q90.jpg", "gray_q80.jpg", "pal32.gif", "pal64.png", "bilevel.png"} {
		path := filepath.Join("../testdata/preprocess-kinds", name)
		if _, err := Decode(path); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("%s with MaxPixels %d: err %v", name, MaxPixels, err)
		}
	}
}

// TestNearestTableMatchesPIL checks the NEAREST index rule on cases computed
// by hand from PIL's ImagingScaleAffine: floor((i + 0.5)·in/out).
func TestNearestTableMatchesPIL(t *testing.T) {
	for _, c := range []struct{ in, out int }{{3, 7}, {7, 3}, {10, 4}, {224, 224}, {97, 40}, {13, 224}, {1, 5}} {
		tab := nearestTable(c.in, c.out)
		for i, got := range tab {
			want := (2*i + 1) * c.in / (2 * c.out) // exact floor in integers
			if got != want {
				t.Errorf("in %d out %d: index %d maps to %d, want %d", c.in, c.out, i, got, want)
			}
		}
	}
}

// TestBilevelPNGIsPaletted: a 1-bit gray PNG opens as PIL's mode "1", here a
// black/white paletted image.
func TestBilevelPNGIsPaletted(t *testing.T) {
	img, err := Decode("../testdata/preprocess-kinds/bilevel.png")
	if err != nil {
		t.Fatal(err)
	}
	p, ok := img.(*image.Paletted)
	if !ok || len(p.Palette) != 2 {
		t.Fatalf("bilevel.png decoded as %T", img)
	}
	if img, err := Decode("../testdata/preprocess-kinds/gray.png"); err != nil {
		t.Fatal(err)
	} else if _, ok := img.(*image.Gray); !ok {
		t.Errorf("gray.png decoded as %T, want *image.Gray", img)
	}
}

// fuzzDecode is the body of the decoding fuzz targets: decoding must never
// crash or panic, a success must respect MaxPixels, and the decoded image
// must go through the transform.
func fuzzDecode(t *testing.T, data []byte) {
	old := MaxPixels
	MaxPixels = 1 << 20 // keep each input cheap
	defer func() { MaxPixels = old }()
	img, err := decodeBytes(data)
	if err != nil {
		if strings.Contains(err.Error(), "decoder panic") {
			t.Fatal(err)
		}
		return
	}
	b := img.Bounds()
	if b.Empty() || b.Dx() > MaxPixels/b.Dy() {
		t.Fatalf("decoded bounds %v", b)
	}
	tr := CLIPTransform(8)
	if out, err := tr.EvalInto(img, nil); err != nil || len(out) != tr.Len() {
		t.Fatalf("transform of a decoded %T: %d values, %v", img, len(out), err)
	}
}

// FuzzDecodeJPEG fuzzes the JPEG decoder (libjpeg-turbo in the cgo build);
// seeds are in testdata/fuzz/FuzzDecodeJPEG.
func FuzzDecodeJPEG(f *testing.F) { f.Fuzz(fuzzDecode) }

// FuzzDecodePNG fuzzes PNG decoding with the P/1 handling; seeds are in
// testdata/fuzz/FuzzDecodePNG.
func FuzzDecodePNG(f *testing.F) { f.Fuzz(fuzzDecode) }

// TestDecodeFormat: the image.Decode-shaped entry point names the format and
// applies the same checks.
func TestDecodeFormat(t *testing.T) {
	for name, want := range map[string]string{"tiny_q90.jpg": "jpeg", "pal32.gif": "gif", "bilevel.png": "png"} {
		img, format, err := DecodeFormat(bytes.NewReader(readFixture(t, name)))
		if err != nil || format != want || img == nil {
			t.Errorf("%s: format %q, err %v", name, format, err)
		}
	}
	if _, _, err := DecodeFormat(bytes.NewReader(pngWithSize(60000, 60000))); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("bomb: err %v", err)
	}
}
