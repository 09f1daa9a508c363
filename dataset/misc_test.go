package dataset

import (
	"errors"
	"fmt"
	"image"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestImageFolder(t *testing.T) {
	t.Run("flat", func(t *testing.T) {
		root := t.TempDir()
		writeClassFolders(t, root, []string{"golden_retriever", "cat"}, []int{10, 4})
		writeFile(t, root, "empty_dir/notes.txt", []byte("x"))
		d, err := Load("imagefolder", root, Options{Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"cat", "golden retriever"}; !slices.Equal(d.Classes, want) {
			t.Errorf("classes = %q, want %q", d.Classes, want)
		}
		// cat: 4 -> 2/1/1; golden: 10 -> 5/2/3.
		if len(d.Train) != 7 || len(d.Val) != 3 || len(d.Test) != 4 {
			t.Errorf("sizes %d/%d/%d, want 7/3/4", len(d.Train), len(d.Val), len(d.Test))
		}
		d2, err := Load("imagefolder", root, Options{Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		if d.Train[0].Key != d2.Train[0].Key || d.Test[3].Key != d2.Test[3].Key {
			t.Error("same seed, different split")
		}
	})
	t.Run("train/test folders", func(t *testing.T) {
		root := t.TempDir()
		writeClassFolders(t, filepath.Join(root, "train"), []string{"b", "a"}, []int{3, 2})
		writeClassFolders(t, filepath.Join(root, "test"), []string{"a", "c"}, []int{1, 2})
		d, err := Load("imagefolder", root, Options{ValFraction: 0.5})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"a", "b", "c"}; !slices.Equal(d.Classes, want) {
			t.Errorf("classes = %q, want %q", d.Classes, want)
		}
		// ValFraction 0.5: a: round(1)=1 of 2, b: round(1.5)=2 of 3.
		if len(d.Train) != 2 || len(d.Val) != 3 || len(d.Test) != 3 {
			t.Errorf("sizes %d/%d/%d, want 2/3/3", len(d.Train), len(d.Val), len(d.Test))
		}
		for _, it := range d.Test {
			if !strings.HasPrefix(it.Key, "test/"+d.Classes[it.Label]+"/") {
				t.Errorf("test item %q has label %d", it.Key, it.Label)
			}
		}
	})
	t.Run("not a folder", func(t *testing.T) {
		if _, err := Load("imagefolder", filepath.Join(t.TempDir(), "nope"), Options{}); err == nil {
			t.Error("no error")
		}
	})
}

func writeFashion(t *testing.T, dir string, gz bool, n int, labels []byte, magicImages uint32) {
	t.Helper()
	suffix := ""
	if gz {
		suffix = ".gz"
	}
	for _, prefix := range []string{"train", "t10k"} {
		pix := make([]byte, n*4*3)
		for i := range pix {
			pix[i] = byte(i)
		}
		writeFile(t, dir, prefix+"-images-idx3-ubyte"+suffix, idxBytes(t, magicImages, []int{n, 4, 3}, pix, gz))
		writeFile(t, dir, prefix+"-labels-idx1-ubyte"+suffix, idxBytes(t, idxLabelsMagic, []int{len(labels)}, labels, gz))
	}
}

func TestFashionMNIST(t *testing.T) {
	for _, gz := range []bool{true, false} {
		t.Run(fmt.Sprint("gz=", gz), func(t *testing.T) {
			root := t.TempDir()
			writeFashion(t, filepath.Join(root, "fashion-mnist"), gz, 3, []byte{9, 0, 4}, idxImagesMagic)
			d, err := Load("fashion_mnist", root, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Train) != 3 || len(d.Test) != 3 || d.Classes[9] != "Ankle boot" {
				t.Fatalf("got %d/%d items, classes %q", len(d.Train), len(d.Test), d.Classes)
			}
			if d.Test[2].Label != 4 || d.Test[2].Key != "fashion_mnist/test/2" {
				t.Errorf("test[2] = %+v", d.Test[2])
			}
			img, err := d.Train[1].Source.Load()
			if err != nil {
				t.Fatal(err)
			}
			g, ok := img.(*image.Gray)
			if !ok || g.Bounds() != image.Rect(0, 0, 3, 4) {
				t.Fatalf("got %T %v, want 3x4 gray", img, img.Bounds())
			}
			// Image 1 starts at sample 12; pixel (x=2, y=1) is sample 12+1*3+2.
			if got := g.GrayAt(2, 1).Y; got != 17 {
				t.Errorf("pixel = %d, want 17", got)
			}
		})
	}
}

func TestFashionMNISTErrors(t *testing.T) {
	tests := []struct {
		name  string
		write func(t *testing.T, dir string)
		want  []string
	}{
		{"bad magic", func(t *testing.T, dir string) {
			writeFashion(t, dir, true, 2, []byte{1, 2}, 0x00000802)
		}, []string{"train-images-idx3-ubyte.gz", "magic", "0x00000802"}},
		{"bad label", func(t *testing.T, dir string) {
			writeFashion(t, dir, true, 2, []byte{1, 10}, idxImagesMagic)
		}, []string{"train-labels-idx1-ubyte.gz", "label 1", "value 10"}},
		{"count mismatch", func(t *testing.T, dir string) {
			writeFashion(t, dir, true, 2, []byte{1, 2, 3}, idxImagesMagic)
		}, []string{"2 images", "3 labels"}},
		{"truncated", func(t *testing.T, dir string) {
			writeFashion(t, dir, false, 2, []byte{1, 2}, idxImagesMagic)
			writeFile(t, dir, "t10k-images-idx3-ubyte", idxBytes(t, idxImagesMagic, []int{2, 4, 3}, make([]byte, 20), false))
		}, []string{"t10k-images-idx3-ubyte", "data", "want 24 bytes"}},
		{"not gzip", func(t *testing.T, dir string) {
			writeFashion(t, dir, true, 2, []byte{1, 2}, idxImagesMagic)
			writeFile(t, dir, "t10k-labels-idx1-ubyte.gz", []byte("plain"))
		}, []string{"t10k-labels-idx1-ubyte.gz", "gzip"}},
		{"missing", func(t *testing.T, dir string) {}, []string{"train-images-idx3-ubyte"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			tc.write(t, root)
			_, err := Load("fashion_mnist", root, Options{})
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
}

func TestRegistry(t *testing.T) {
	want := []string{"caltech101", "cifar10", "cifar100", "domainnet", "dtd", "fashion_mnist", "food101", "imagefolder", "office_caltech10", "oxford_flowers", "oxford_pets", "sun397", "ucf101"}
	for _, n := range want {
		if !slices.Contains(Names(), n) {
			t.Errorf("loader %q not registered", n)
		}
	}
	gen := func(root string, opts Options) (*Dataset, error) {
		return &Dataset{
			Classes: []string{"x", "y"},
			Train: []Item{
				{Key: "a", Label: 0, Source: Pixels{1, 1, 1, false, []byte{1}}},
				{Key: "b", Label: 0, Source: Pixels{1, 1, 1, false, []byte{2}}},
				{Key: "c", Label: 1, Source: Pixels{1, 1, 1, false, []byte{3}}},
				{Key: "d", Label: 1, Source: Pixels{1, 1, 1, false, []byte{4}}},
			},
		}, nil
	}
	if err := Register("test_generated", gen); err != nil {
		t.Fatal(err)
	}
	if err := Register("test_generated", gen); err == nil {
		t.Error("duplicate Register accepted")
	}
	if err := Register("", gen); err == nil {
		t.Error("empty name accepted")
	}
	d, err := Load("test_generated", "", Options{ValFraction: 0.5, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "test_generated" || !slices.Equal(d.Domains, []string{"test_generated"}) {
		t.Errorf("name %q domains %q", d.Name, d.Domains)
	}
	if len(d.Train) != 2 || len(d.Val) != 2 || d.Val[0].Label == d.Val[1].Label {
		t.Errorf("val carve-out: train %v val %v", d.Train, d.Val)
	}
	if _, err := Load("no_such", "", Options{}); !errors.Is(err, ErrUnknown) {
		t.Errorf("unknown name: %v", err)
	}

	bad := func(root string, opts Options) (*Dataset, error) {
		return &Dataset{Classes: []string{"x"}, Train: []Item{{Key: "a", Label: 1, Source: Pixels{}}}}, nil
	}
	if err := Register("test_bad", bad); err != nil {
		t.Fatal(err)
	}
	if _, err := Load("test_bad", "", Options{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "label 1") {
		t.Errorf("invalid dataset: %v", err)
	}
}

func TestValidate(t *testing.T) {
	src := Pixels{1, 1, 1, false, []byte{0}}
	tests := []struct {
		name string
		d    Dataset
		want string
	}{
		{"ok", Dataset{Classes: []string{"a"}, Domains: []string{"d"}, Train: []Item{{Key: "k", Source: src}}}, ""},
		{"dup key", Dataset{Classes: []string{"a"}, Domains: []string{"d"}, Train: []Item{{Key: "k", Source: src}}, Test: []Item{{Key: "k", Source: src}}}, "key also in train"},
		{"domain", Dataset{Classes: []string{"a"}, Domains: []string{"d"}, Val: []Item{{Key: "k", Domain: 1, Source: src}}}, "domain 1"},
		{"no source", Dataset{Classes: []string{"a"}, Domains: []string{"d"}, Val: []Item{{Key: "k"}}}, "no image source"},
		{"empty key", Dataset{Classes: []string{"a"}, Domains: []string{"d"}, Val: []Item{{Source: src}}}, "empty key"},
		{"no classes", Dataset{Domains: []string{"d"}}, "no classes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.d.Validate()
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestPixels(t *testing.T) {
	tests := []struct {
		name string
		p    Pixels
		at   [2]int
		want [3]uint8
	}{
		{"gray", Pixels{2, 1, 1, false, []byte{10, 20}}, [2]int{1, 0}, [3]uint8{20, 20, 20}},
		{"interleaved", Pixels{2, 1, 3, false, []byte{1, 2, 3, 4, 5, 6}}, [2]int{1, 0}, [3]uint8{4, 5, 6}},
		{"planar", Pixels{2, 1, 3, true, []byte{1, 2, 3, 4, 5, 6}}, [2]int{1, 0}, [3]uint8{2, 4, 6}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			img, err := tc.p.Load()
			if err != nil {
				t.Fatal(err)
			}
			r, g, b, _ := img.At(tc.at[0], tc.at[1]).RGBA()
			if got := [3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8)}; got != tc.want {
				t.Errorf("pixel = %v, want %v", got, tc.want)
			}
		})
	}
	for _, bad := range []Pixels{{2, 2, 3, false, []byte{1}}, {1, 1, 2, false, []byte{1, 2}}, {0, 1, 1, false, nil}} {
		if _, err := bad.Load(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
	if _, err := (FileSource{Path: filepath.Join(t.TempDir(), "x.png")}).Load(); err == nil || !strings.Contains(err.Error(), "x.png") {
		t.Errorf("missing file: %v", err)
	}
	p := writeFile(t, t.TempDir(), "bad.png", []byte("not a png"))
	if _, err := (FileSource{Path: p}).Load(); err == nil || !strings.Contains(err.Error(), "decode") {
		t.Errorf("bad file: %v", err)
	}
}

func FuzzLoadPickle(f *testing.F) {
	f.Add(cifarPickle(cifar10Fix, "test", []int{1}, "labels", 2, true))
	f.Add(cifarPickle(cifar10Fix, "test", []int{1, 2}, "labels", 3, false))
	f.Add(pklPair("2xN U array, protocol 5", siteEntries("d", "s", "train", []string{"a"})))
	f.Fuzz(func(t *testing.T, b []byte) {
		// Must return (possibly an error) without panicking.
		v, err := decodePickle(b)
		if err == nil {
			_, _ = pathLabelPairs(v)
		}
	})
}
