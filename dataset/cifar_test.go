package dataset

import (
	"fmt"
	"image"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// cifarFixture is a tiny CIFAR: per split, the labels of its records; record
// r of a split has pixel seed 10*r (+100 for test).
type cifarFixture struct {
	classes     []string
	train, test []int
}

func (f cifarFixture) seed(split string, r int) byte {
	if split == "test" {
		return byte(100 + r)
	}
	return byte(10 * r)
}

// pixels returns the 3072 planar bytes of record r.
func (f cifarFixture) pixels(split string, r int) []byte {
	return cifarRecord(nil, f.seed(split, r))
}

func writeCIFAR10Bin(t *testing.T, root string, f cifarFixture) {
	dir := filepath.Join(root, "cifar-10-batches-bin")
	writeFile(t, dir, "batches.meta.txt", []byte(strings.Join(f.classes, "\n")+"\n\n"))
	// Train records are spread over the five batch files in order.
	per := (len(f.train) + 4) / 5
	for b := 0; b < 5; b++ {
		var buf []byte
		for r := b * per; r < min((b+1)*per, len(f.train)); r++ {
			buf = append(buf, cifarRecord([]byte{byte(f.train[r])}, f.seed("train", r))...)
		}
		writeFile(t, dir, fmt.Sprintf("data_batch_%d.bin", b+1), buf)
	}
	var buf []byte
	for r, l := range f.test {
		buf = append(buf, cifarRecord([]byte{byte(l)}, f.seed("test", r))...)
	}
	writeFile(t, dir, "test_batch.bin", buf)
}

func writeCIFAR100Bin(t *testing.T, root string, f cifarFixture) {
	dir := filepath.Join(root, "cifar-100-binary")
	writeFile(t, dir, "fine_label_names.txt", []byte(strings.Join(f.classes, "\n")))
	for _, sp := range []struct {
		file, split string
		labels      []int
	}{{"train.bin", "train", f.train}, {"test.bin", "test", f.test}} {
		var buf []byte
		for r, l := range sp.labels {
			buf = append(buf, cifarRecord([]byte{byte(l / 5), byte(l)}, f.seed(sp.split, r))...)
		}
		writeFile(t, dir, sp.file, buf)
	}
}

// cifarPickle encodes a CIFAR batch dict with one of the pickle dialects.
func cifarPickle(f cifarFixture, split string, labels []int, labelKey string, proto byte, py2 bool) []byte {
	var raw []byte
	for r := range labels {
		raw = append(raw, f.pixels(split, r)...)
	}
	p := newPickler(proto, py2)
	p.dict(
		"batch_label", func() { p.str("training batch 1 of 1") },
		labelKey, func() {
			p.op(']', '(')
			for _, l := range labels {
				p.int(l)
			}
			p.op('e')
		},
		"data", func() { p.ndarray("u1", "|", -1, []int{len(labels), cifarPixels}, raw, nil) },
		"filenames", func() { p.list(func() { p.str("a.png") }) },
	)
	return p.done()
}

func writeCIFARPy(t *testing.T, root string, f cifarFixture, hundred bool, proto byte, py2 bool) {
	dir, trainFiles, testFile, meta, namesKey, labelKey := "cifar-10-batches-py", []string{"data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5"}, "test_batch", "batches.meta", "label_names", "labels"
	if hundred {
		dir, trainFiles, testFile, meta, namesKey, labelKey = "cifar-100-python", []string{"train"}, "test", "meta", "fine_label_names", "fine_labels"
	}
	p := newPickler(proto, py2)
	p.dict(namesKey, func() {
		p.op(']', '(')
		for _, c := range f.classes {
			p.str(c)
		}
		p.op('e')
	}, "num_vis", func() { p.int(3072) })
	writeFile(t, root, dir+"/"+meta, p.done())
	// Train records are spread over the batch files in order.
	per := (len(f.train) + len(trainFiles) - 1) / len(trainFiles)
	for i, name := range trainFiles {
		lo, hi := min(i*per, len(f.train)), min((i+1)*per, len(f.train))
		var raw []int
		for r := lo; r < hi; r++ {
			raw = append(raw, f.train[r])
		}
		p := newPickler(proto, py2)
		var pix []byte
		for r := lo; r < hi; r++ {
			pix = append(pix, f.pixels("train", r)...)
		}
		p.dict(labelKey, func() {
			p.op(']', '(')
			for _, l := range raw {
				p.int(l)
			}
			p.op('e')
		}, "data", func() { p.ndarray("u1", "|", -1, []int{len(raw), cifarPixels}, pix, nil) })
		writeFile(t, root, dir+"/"+name, p.done())
	}
	writeFile(t, root, dir+"/"+testFile, cifarPickle(f, "test", f.test, labelKey, proto, py2))
}

func checkCIFAR(t *testing.T, d *Dataset, f cifarFixture, wantClasses []string) {
	t.Helper()
	if !slices.Equal(d.Classes, wantClasses) {
		t.Errorf("classes = %q, want %q", d.Classes, wantClasses)
	}
	for _, sp := range []struct {
		split  string
		items  []Item
		labels []int
	}{{"train", d.Train, f.train}, {"test", d.Test, f.test}} {
		if len(sp.items) != len(sp.labels) {
			t.Fatalf("%s: %d items, want %d", sp.split, len(sp.items), len(sp.labels))
		}
		for r, it := range sp.items {
			if it.Label != sp.labels[r] {
				t.Errorf("%s[%d] label = %d, want %d", sp.split, r, it.Label, sp.labels[r])
			}
			if want := fmt.Sprintf("%s/%s/%d", d.Name, sp.split, r); it.Key != want {
				t.Errorf("%s[%d] key = %q, want %q", sp.split, r, it.Key, want)
			}
			img, err := it.Source.Load()
			if err != nil {
				t.Fatal(err)
			}
			rgba, ok := img.(*image.RGBA)
			if !ok || rgba.Bounds() != image.Rect(0, 0, 32, 32) {
				t.Fatalf("%s[%d]: got %T %v", sp.split, r, img, img.Bounds())
			}
			// Pixel (x, y) = index i: planes give (seed+i, seed+1+i, seed+2+i).
			s := f.seed(sp.split, r)
			for _, i := range []int{0, 33, 1023} {
				c := rgba.RGBAAt(i%32, i/32)
				want := [4]byte{s + byte(i), s + 1 + byte(i), s + 2 + byte(i), 255}
				if [4]byte{c.R, c.G, c.B, c.A} != want {
					t.Errorf("%s[%d] pixel %d = %v, want %v", sp.split, r, i, c, want)
				}
			}
		}
	}
}

var (
	cifar10Names = []string{"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"}
	cifar10Fix   = cifarFixture{classes: cifar10Names, train: []int{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9}, test: []int{9, 7, 0}}
)

func cifar100Fixture() (cifarFixture, []string) {
	var names, prompt []string
	for i := 0; i < 100; i++ {
		names = append(names, fmt.Sprintf("class_%d", i))
		prompt = append(prompt, fmt.Sprintf("class %d", i))
	}
	return cifarFixture{classes: names, train: []int{99, 0, 42, 17}, test: []int{5, 98}}, prompt
}

func TestCIFARBinary(t *testing.T) {
	t.Run("cifar10", func(t *testing.T) {
		root := t.TempDir()
		writeCIFAR10Bin(t, root, cifar10Fix)
		d, err := Load("cifar10", root, Options{})
		if err != nil {
			t.Fatal(err)
		}
		checkCIFAR(t, d, cifar10Fix, cifar10Names)
	})
	t.Run("cifar100", func(t *testing.T) {
		root := t.TempDir()
		f, prompt := cifar100Fixture()
		writeCIFAR100Bin(t, root, f)
		d, err := Load("cifar100", root, Options{})
		if err != nil {
			t.Fatal(err)
		}
		checkCIFAR(t, d, f, prompt)
	})
}

func TestCIFARPickle(t *testing.T) {
	dialects := []struct {
		name  string
		proto byte
		py2   bool
	}{
		{"python2 protocol 2", 2, true},
		{"python3 protocol 2", 2, false},
		{"python3 protocol 3", 3, false},
	}
	for _, dl := range dialects {
		t.Run("cifar10/"+dl.name, func(t *testing.T) {
			root := t.TempDir()
			writeCIFARPy(t, root, cifar10Fix, false, dl.proto, dl.py2)
			d, err := Load("cifar10", root, Options{})
			if err != nil {
				t.Fatal(err)
			}
			checkCIFAR(t, d, cifar10Fix, cifar10Names)
		})
		t.Run("cifar100/"+dl.name, func(t *testing.T) {
			root := t.TempDir()
			f, prompt := cifar100Fixture()
			writeCIFARPy(t, root, f, true, dl.proto, dl.py2)
			d, err := Load("cifar100", root, Options{})
			if err != nil {
				t.Fatal(err)
			}
			checkCIFAR(t, d, f, prompt)
		})
	}
}

func TestCIFARErrors(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(t *testing.T, root string)
		want    []string
	}{
		{"truncated record", func(t *testing.T, root string) {
			writeFile(t, root, "cifar-10-batches-bin/test_batch.bin", append(cifarRecord([]byte{1}, 0), 7, 7, 7))
		}, []string{"test_batch.bin", "record 1 truncated"}},
		{"bad label", func(t *testing.T, root string) {
			writeFile(t, root, "cifar-10-batches-bin/data_batch_2.bin", cifarRecord([]byte{10}, 0))
		}, []string{"data_batch_2.bin", "record 0", "label 10"}},
		{"missing batch", func(t *testing.T, root string) {
			writeFile(t, root, "cifar-10-batches-bin/data_batch_5.bin", nil)
		}, []string{"data_batch_5.bin", "empty"}},
		{"names count", func(t *testing.T, root string) {
			writeFile(t, root, "cifar-10-batches-bin/batches.meta.txt", []byte("a\nb\n"))
		}, []string{"batches.meta.txt", "want 10 names, got 2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeCIFAR10Bin(t, root, cifar10Fix)
			tc.corrupt(t, root)
			_, err := Load("cifar10", root, Options{})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if _, err := Load("cifar100", t.TempDir(), Options{}); err == nil || !strings.Contains(err.Error(), "cifar-100-binary") {
		t.Errorf("missing folders: got %v", err)
	}
}

func TestCIFARPickleErrors(t *testing.T) {
	tests := []struct {
		name string
		data func() []byte
		want string
	}{
		{"empty file", func() []byte { return nil }, "truncated"},
		{"huge length", func() []byte { return []byte{0x80, 3, 'B', 0xff, 0xff, 0xff, 0x7f, 'x', '.'} }, "runs past the end"},
		{"huge frame", func() []byte { return []byte{0x80, 4, 0x95, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '.'} }, "frame"},
		{"unknown opcode", func() []byte { return []byte{0x80, 2, 0xff, '.'} }, "unknown opcode 0xff"},
		{"missing labels key", func() []byte { return cifarPickle(cifar10Fix, "test", []int{1, 2}, "fine_labels", 2, true) }, `key "labels": missing`},
		{"label range", func() []byte { return cifarPickle(cifar10Fix, "test", []int{1, 12}, "labels", 2, false) }, "label 12"},
		{"foreign class", func() []byte {
			p := newPickler(2, false)
			p.global("os", "system").str("true").op(0x85, 'R')
			return p.done()
		}, "os.system is not allowed"},
		{"truncated", func() []byte { b := cifarPickle(cifar10Fix, "test", []int{1}, "labels", 2, true); return b[:len(b)/2] }, "test_batch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeCIFARPy(t, root, cifar10Fix, false, 2, true)
			writeFile(t, root, "cifar-10-batches-py/test_batch", tc.data())
			_, err := Load("cifar10", root, Options{})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range []string{"test_batch", tc.want} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
