package preprocess

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const fixtureDir = "../testdata/preprocess"

// stTensor is one tensor of a safetensors file.
type stTensor struct {
	Shape []int
	Data  []float32
}

// readSafetensors is a minimal F32-only safetensors reader for the fixtures
// (8-byte little-endian header length, JSON header, raw data).
func readSafetensors(path string) (map[string]stTensor, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < 8 {
		return nil, fmt.Errorf("%s: short file", path)
	}
	n := binary.LittleEndian.Uint64(b)
	if n > uint64(len(b)-8) {
		return nil, fmt.Errorf("%s: header length %d beyond file", path, n)
	}
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		return nil, fmt.Errorf("%s: header: %w", path, err)
	}
	data := b[8+n:]
	out := map[string]stTensor{}
	for name, raw := range hdr {
		if name == "__metadata__" {
			continue
		}
		var e struct {
			Dtype   string `json:"dtype"`
			Shape   []int  `json:"shape"`
			Offsets [2]int `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, fmt.Errorf("%s: tensor %q: %w", path, name, err)
		}
		if e.Dtype != "F32" || e.Offsets[0] < 0 || e.Offsets[1] > len(data) || e.Offsets[0] > e.Offsets[1] {
			return nil, fmt.Errorf("%s: tensor %q: unsupported entry %+v", path, name, e)
		}
		raw := data[e.Offsets[0]:e.Offsets[1]]
		v := make([]float32, len(raw)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		out[name] = stTensor{Shape: e.Shape, Data: v}
	}
	return out, nil
}

// diffStats returns the maximum and mean absolute difference.
func diffStats(a, b []float32) (maxAbs, meanAbs float64) {
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		maxAbs = max(maxAbs, d)
		meanAbs += d
	}
	return maxAbs, meanAbs / float64(len(a))
}

// Tolerances of testdata/README.md ("Tolerances"): PNG/GIF inputs of every
// mode max |Δ| ≤ 0.02; JPEG inputs max |Δ| ≤ 0.003 when decoded by
// libjpeg-turbo as PIL does. The purego build decodes JPEG with Go's
// image/jpeg, which differs from libjpeg-turbo by a level or more on many
// pixels; its JPEG bound is jpegTolPurego.
const (
	tolLossless = 0.02
	tolJPEG     = 0.003
	// jpegTolPurego bounds Go's image/jpeg against the libjpeg-turbo
	// reference: a few levels at worst (measured 0.057 on these fixtures).
	jpegTolPurego = 0.08
)

// checkFixtureDir compares the CLIP evaluation transform at 224 of every
// image in dir with the reference tensors in dir/expected.safetensors, and
// checks that every image file of dir has a reference.
func checkFixtureDir(t *testing.T, dir string) {
	want, err := readSafetensors(filepath.Join(dir, "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	if len(names) == 0 {
		t.Fatal("no fixture tensors")
	}
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, ok := want[f.Name()]; !ok && f.Name() != "expected.safetensors" {
			t.Errorf("%s: no reference tensor for %s", dir, f.Name())
		}
	}
	tr := CLIPTransform(224)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			ref := want[name]
			got, err := tr.EvalFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(ref.Data) || fmt.Sprint(ref.Shape) != "[3 224 224]" {
				t.Fatalf("got %d values, want shape %v", len(got), ref.Shape)
			}
			maxAbs, meanAbs := diffStats(got, ref.Data)
			t.Logf("%s: max |Δ| %.3g, mean |Δ| %.3g", name, maxAbs, meanAbs)
			tol := tolLossless
			switch strings.ToLower(filepath.Ext(name)) {
			case ".png", ".gif":
			case ".jpg", ".jpeg":
				tol = tolJPEG
				if !JPEGExact {
					tol = jpegTolPurego
					t.Logf("purego build: Go's image/jpeg is not bit-exact with libjpeg-turbo; JPEG bound loosened to max |Δ| ≤ %g", tol)
				}
			default:
				t.Fatalf("no tolerance for the file type of %s", name)
			}
			if maxAbs > tol {
				t.Errorf("max |Δ| = %g > %g", maxAbs, tol)
			}
		})
	}
}

func TestEvalMatchesFixtures(t *testing.T) { checkFixtureDir(t, fixtureDir) }

func TestEvalMatchesFixtureKinds(t *testing.T) { checkFixtureDir(t, "../testdata/preprocess-kinds") }

// TestEvalMatchesPillowExtras compares against preprocess/testdata, generated
// with Pillow 9.4.0 (see testdata/README): more formats (BMP, GIF, WebP lossy,
// lossless and with alpha, gray+alpha, palette, bi-level), JPEG subsamplings,
// CMYK and odd sizes, and the bilinear filter, at output size 40. Lossless
// sources and WebP (VP8 decoding is exactly specified) must match to float32
// rounding; JPEG within the README's JPEG tolerance (looser in the purego
// build).
func TestEvalMatchesPillowExtras(t *testing.T) {
	want, err := readSafetensors(filepath.Join("testdata", "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 10 {
		t.Fatalf("only %d reference tensors", len(want))
	}
	for name, ref := range want {
		t.Run(name, func(t *testing.T) {
			tr := CLIPTransform(40)
			file := name
			if f, ok := strings.CutPrefix(name, "bilinear:"); ok {
				tr.Interp, file = Bilinear, f
			}
			got, err := tr.EvalFile(filepath.Join("testdata", file))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(ref.Data) {
				t.Fatalf("got %d values, want %d", len(got), len(ref.Data))
			}
			maxAbs, meanAbs := diffStats(got, ref.Data)
			t.Logf("%s: max |Δ| %.3g, mean |Δ| %.3g", name, maxAbs, meanAbs)
			if strings.HasSuffix(file, ".jpg") {
				tol := tolJPEG
				if !JPEGExact {
					tol = jpegTolPurego
					t.Logf("purego build: Go's image/jpeg is not bit-exact with libjpeg-turbo; JPEG bound loosened to max |Δ| ≤ %g", tol)
				}
				if maxAbs > tol {
					t.Errorf("max |Δ| = %g > %g", maxAbs, tol)
				}
			} else if maxAbs > 1e-5 {
				t.Errorf("max |Δ| = %g > 1e-5", maxAbs)
			}
		})
	}
}
