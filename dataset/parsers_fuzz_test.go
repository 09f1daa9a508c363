package dataset

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Fuzz targets for the dataset file parsers that read user-supplied files:
// CIFAR batches (binary and pickled), IDX files, FedBN list files and the
// Oxford Pets list. (FuzzParseSplit covers CoOp split JSON and
// FuzzLoadPickle the FedBN pickles.)

// fuzzFile writes b to name in a per-process temporary folder.
func fuzzFile(t *testing.T, dir, name string, b []byte) string {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func cifarSpecFor(hundred bool) cifarSpec {
	if hundred {
		return cifar100Spec
	}
	return cifar10Spec
}

// checkCIFARItems: every item has a label in range and 3072 planar pixels.
func checkCIFARItems(t *testing.T, spec cifarSpec, items []Item) {
	for _, it := range items {
		px, ok := it.Source.(Pixels)
		if it.Label < 0 || it.Label >= spec.nClasses || !ok || len(px.Pix) != cifarPixels {
			t.Fatalf("item %s: label %d, source %T with %d bytes", it.Key, it.Label, it.Source, len(px.Pix))
		}
	}
}

func FuzzCIFARBin(f *testing.F) {
	f.Add(cifarRecord([]byte{3}, 7), false)
	f.Add(append(cifarRecord([]byte{1, 42}, 1), cifarRecord([]byte{0, 99}, 2)...), true)
	f.Add(cifarRecord([]byte{10}, 0), false) // label out of range
	f.Add([]byte{1, 2, 3}, false)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte, hundred bool) {
		spec := cifarSpecFor(hundred)
		p := fuzzFile(t, dir, "batch.bin", b)
		items, err := readCIFARBin(spec, p, "train", nil)
		if err != nil {
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if rec := spec.labelByte + 1 + cifarPixels; len(items) != len(b)/rec || len(b)%rec != 0 {
			t.Fatalf("%d bytes gave %d records of %d bytes", len(b), len(items), rec)
		}
		checkCIFARItems(t, spec, items)
	})
}

func FuzzCIFARPy(f *testing.F) {
	fx := cifarFixture{classes: []string{"a", "b", "c"}}
	for _, proto := range []byte{2, 4, 5} {
		f.Add(cifarPickle(fx, "train", []int{1, 2}, "labels", proto, false), false)
	}
	f.Add(cifarPickle(fx, "test", []int{0}, "labels", 2, true), false)
	f.Add(cifarPickle(fx, "test", []int{42}, "fine_labels", 3, false), true)
	f.Add(cifarPickle(fx, "test", []int{11}, "labels", 2, false), false) // label out of range
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte, hundred bool) {
		spec := cifarSpecFor(hundred)
		p := fuzzFile(t, dir, "batch", b)
		items, err := readCIFARPy(spec, p, "train", nil)
		if err != nil {
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		checkCIFARItems(t, spec, items)
	})
}

// idxSeed encodes an IDX file of uint8 elements.
func idxSeed(magic uint32, dims []uint32, data []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.BigEndian, magic)
	for _, d := range dims {
		binary.Write(&b, binary.BigEndian, d)
	}
	b.Write(data)
	return b.Bytes()
}

func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func FuzzIDX(f *testing.F) {
	img := idxSeed(0x803, []uint32{2, 2, 3}, make([]byte, 12))
	lab := idxSeed(0x801, []uint32{4}, []byte{0, 1, 9, 3})
	f.Add(img, false)
	f.Add(lab, false)
	f.Add(gzipBytes(img), true)
	f.Add(idxSeed(0x803, []uint32{1 << 20, 1 << 20}, nil), false) // too large
	f.Add(lab[:len(lab)-1], false)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte, gz bool) {
		name := "x.idx"
		if gz {
			name += ".gz"
		}
		p := fuzzFile(t, dir, name, b)
		// Take the magic from the input so that the fuzzer gets past it.
		var magic uint32 = 0x803
		if len(b) >= 4 && !gz {
			magic = binary.BigEndian.Uint32(b)
		}
		dims, data, err := ReadIDX(p, magic)
		if err != nil {
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		n := 1
		for _, d := range dims {
			if d <= 0 {
				t.Fatalf("dims %v", dims)
			}
			n *= d
		}
		if n != len(data) || len(dims) != int(magic&0xff) {
			t.Fatalf("dims %v (magic %#x) for %d bytes", dims, magic, len(data))
		}
	})
}

func FuzzReadListFile(f *testing.F) {
	f.Add([]byte("clipart/aircraft_carrier/a.jpg\taircraft_carrier\n# comment\n\nb.jpg\tbird\n"), uint8(0))
	f.Add([]byte("a.jpg,cat\n\"b, c.jpg\",dog\n#x,y\n"), uint8(1))
	f.Add([]byte("amazon/back_pack/frame_0001.jpg back_pack\npath with space.jpg  mug\n"), uint8(2))
	f.Add([]byte("a.jpg\n"), uint8(2))
	f.Add([]byte("a\tb\tc\n"), uint8(0))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte, kind uint8) {
		ext := listExts[int(kind)%len(listExts)]
		p := fuzzFile(t, dir, "list"+ext, b)
		pairs, err := readListFile(p, ext)
		if err != nil {
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		for _, pc := range pairs {
			if pc.path == "" || pc.class == "" || strings.TrimSpace(pc.path) != pc.path {
				t.Fatalf("accepted bad pair %+v", pc)
			}
		}
	})
}

func FuzzReadPetsList(f *testing.F) {
	f.Add([]byte("#Image CLASS-ID SPECIES BREED ID\nAbyssinian_100 1 1 1\nyorkshire_terrier_99 37 2 25\n"))
	f.Add([]byte("american_bulldog_1 0 2 1\n"))
	f.Add([]byte("nounderscore 3\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := fuzzFile(t, dir, "trainval.txt", b)
		es, err := readPetsList(p)
		if err != nil {
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if len(es) == 0 {
			t.Fatal("no entries and no error")
		}
		for _, e := range es {
			if e.Label < 0 || e.Class == "" || !strings.HasSuffix(e.Path, ".jpg") {
				t.Fatalf("accepted bad entry %+v", e)
			}
		}
	})
}
