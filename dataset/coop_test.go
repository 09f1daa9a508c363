package dataset

import (
	"fmt"
	"image"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCoOpSplitFile(t *testing.T) {
	tests := []struct {
		name    string // loader
		dsDir   string
		images  string
		split   string
		classes []string // stored names, label order
		want    []string // prompt names
	}{
		{"caltech101", "caltech-101", "101_ObjectCategories", "split_zhou_Caltech101.json", []string{"accordion", "face", "dollar_bill"}, []string{"accordion", "face", "dollar bill"}},
		{"oxford_pets", "oxford_pets", "images", "split_zhou_OxfordPets.json", []string{"abyssinian", "american_bulldog"}, []string{"abyssinian", "american bulldog"}},
		{"oxford_flowers", "oxford_flowers", "jpg", "split_zhou_OxfordFlowers.json", []string{"pink primrose", "globe thistle"}, []string{"pink primrose", "globe thistle"}},
		{"food101", "food-101", "images", "split_zhou_Food101.json", []string{"apple_pie", "baby_back_ribs"}, []string{"apple pie", "baby back ribs"}},
		{"dtd", "dtd", "images", "split_zhou_DescribableTextures.json", []string{"banded", "blotchy"}, []string{"banded", "blotchy"}},
		{"sun397", "sun397", "SUN397", "split_zhou_SUN397.json", []string{"abbey", "outdoor apartment_building"}, []string{"abbey", "outdoor apartment building"}},
		{"sun397", "SUN397", "SUN397", "split_zhou_SUN397.json", []string{"abbey", "airport_terminal"}, []string{"abbey", "airport terminal"}},
		{"ucf101", "ucf101", "UCF-101-midframes", "split_zhou_UCF101.json", []string{"Apply_Eye_Makeup", "Archery"}, []string{"Apply Eye Makeup", "Archery"}},
	}
	for _, tc := range tests {
		t.Run(tc.name+"/"+tc.dsDir, func(t *testing.T) {
			root := t.TempDir()
			dsDir := filepath.Join(root, tc.dsDir)
			// Per class: 2 train, 1 val, 1 test; listed in reverse label
			// order to check the class list is ordered by label.
			rows := map[string][]string{}
			for l := len(tc.classes) - 1; l >= 0; l-- {
				for i, sp := range []string{"train", "train", "val", "test"} {
					rel := fmt.Sprintf("c%d/%s_%d.png", l, sp, i)
					writeFile(t, filepath.Join(dsDir, tc.images), rel, pngBytes(t, uint8(10*l+i)))
					rows[sp] = append(rows[sp], fmt.Sprintf("[%q, %d, %q]", rel, l, tc.classes[l]))
				}
			}
			js := fmt.Sprintf(`{"train": [%s], "val": [%s], "test": [%s]}`,
				strings.Join(rows["train"], ","), strings.Join(rows["val"], ","), strings.Join(rows["test"], ","))
			writeFile(t, dsDir, tc.split, []byte(js))

			d, err := Load(tc.name, root, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(d.Classes, tc.want) {
				t.Errorf("classes = %q, want %q", d.Classes, tc.want)
			}
			n := len(tc.classes)
			if len(d.Train) != 2*n || len(d.Val) != n || len(d.Test) != n {
				t.Errorf("sizes %d/%d/%d, want %d/%d/%d", len(d.Train), len(d.Val), len(d.Test), 2*n, n, n)
			}
			it := d.Val[0] // label n-1, index 2
			if it.Label != n-1 || it.Key != fmt.Sprintf("c%d/val_2.png", n-1) {
				t.Errorf("val[0] = %+v", it)
			}
			img, err := it.Source.Load()
			if err != nil {
				t.Fatal(err)
			}
			if r, _, _, _ := img.At(0, 0).RGBA(); r>>8 != uint32(10*(n-1)+2) {
				t.Errorf("val[0] pixel red = %d, want %d", r>>8, 10*(n-1)+2)
			}
		})
	}
}

func TestCoOpSplitFileErrors(t *testing.T) {
	tests := []struct {
		name, json string
		want       []string // substrings of the error
	}{
		{"missing val", `{"train": [["a.png", 0, "x"]], "test": []}`, []string{`field "val": missing`}},
		{"label string", `{"train": [["a.png", "0", "x"]], "val": [], "test": []}`, []string{`"train"[0]`, "label"}},
		{"label negative", `{"train": [], "val": [["a.png", -1, "x"]], "test": []}`, []string{`"val"[0]`, "label"}},
		{"label fraction", `{"train": [["a.png", 1.5, "x"]], "val": [], "test": []}`, []string{"label"}},
		{"short row", `{"train": [["a.png", 0]], "val": [], "test": []}`, []string{`"train"[0]`, "relpath, label, classname"}},
		{"empty class", `{"train": [["a.png", 0, ""]], "val": [], "test": []}`, []string{"classname"}},
		{"absolute path", `{"train": [["/etc/a.png", 0, "x"]], "val": [], "test": []}`, []string{"relpath", "relative"}},
		{"label gap", `{"train": [["a.png", 0, "x"], ["b.png", 2, "z"]], "val": [], "test": []}`, []string{"label 1 has no images"}},
		{"conflicting names", `{"train": [["a.png", 0, "x"]], "val": [], "test": [["b.png", 0, "y"]]}`, []string{`"test"[0]`, `"y"`, `"x"`}},
		{"not json", `[1, 2`, []string{"not a JSON object"}},
		{"no entries", `{"train": [], "val": [], "test": []}`, []string{"no entries"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			f := writeFile(t, root, "dtd/split_zhou_DescribableTextures.json", []byte(tc.json))
			_, err := Load("dtd", root, Options{})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range append(tc.want, f) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestCoOpGenerateCaltech(t *testing.T) {
	root := t.TempDir()
	images := filepath.Join(root, "caltech-101", "101_ObjectCategories")
	// 10 images: round(5)=5 train, round(2)=2 val, 3 test. 7 images:
	// round(3.5)=4 train, round(1.4)=1 val, 2 test.
	writeClassFolders(t, images,
		[]string{"accordion", "airplanes", "Faces", "Faces_easy", "BACKGROUND_Google", "Leopards"},
		[]int{10, 7, 10, 10, 10, 10})
	splitFile := filepath.Join(root, "caltech-101", "split_zhou_Caltech101.json")

	d1, err := Load("caltech101", root, Options{Seed: 1, NoWriteSplit: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(splitFile); err == nil {
		t.Fatal("NoWriteSplit wrote the split file")
	}
	// Byte order puts upper case first, as Python's sort does.
	wantClasses := []string{"face", "leopard", "accordion", "airplane"}
	if !slices.Equal(d1.Classes, wantClasses) {
		t.Fatalf("classes = %q, want %q", d1.Classes, wantClasses)
	}
	count := func(items []Item) map[int]int {
		m := map[int]int{}
		for _, it := range items {
			m[it.Label]++
		}
		return m
	}
	wantTrain := map[int]int{0: 5, 1: 5, 2: 5, 3: 4}
	wantVal := map[int]int{0: 2, 1: 2, 2: 2, 3: 1}
	wantTest := map[int]int{0: 3, 1: 3, 2: 3, 3: 2}
	for _, c := range []struct {
		name      string
		got, want map[int]int
	}{{"train", count(d1.Train), wantTrain}, {"val", count(d1.Val), wantVal}, {"test", count(d1.Test), wantTest}} {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s per-class counts = %v, want %v", c.name, c.got, c.want)
		}
	}
	for _, it := range d1.Train {
		if strings.HasPrefix(it.Key, "Faces_easy/") || strings.HasPrefix(it.Key, "BACKGROUND_Google/") {
			t.Errorf("ignored class folder used: %s", it.Key)
		}
	}

	keys := func(d *Dataset) string {
		var ks []string
		for _, s := range [][]Item{d.Train, d.Val, d.Test} {
			for _, it := range s {
				ks = append(ks, it.Key)
			}
			ks = append(ks, "|")
		}
		return strings.Join(ks, ",")
	}
	d1b, err := Load("caltech101", root, Options{Seed: 1, NoWriteSplit: true})
	if err != nil {
		t.Fatal(err)
	}
	if keys(d1) != keys(d1b) {
		t.Error("same seed gave different splits")
	}
	d2, err := Load("caltech101", root, Options{Seed: 2, NoWriteSplit: true})
	if err != nil {
		t.Fatal(err)
	}
	if keys(d1) == keys(d2) {
		t.Error("different seeds gave the same split")
	}

	// Written split file is read back to the same dataset, whatever the seed.
	if _, err := Load("caltech101", root, Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSplitFile(splitFile); err != nil {
		t.Fatalf("written split file unreadable: %v", err)
	}
	d3, err := Load("caltech101", root, Options{Seed: 99})
	if err != nil {
		t.Fatal(err)
	}
	if keys(d3) != keys(d1) || !slices.Equal(d3.Classes, d1.Classes) {
		t.Error("reloading the written split gave a different dataset")
	}
}

func TestCoOpGenerateSUN397(t *testing.T) {
	root := t.TempDir()
	images := filepath.Join(root, "SUN397", "SUN397")
	writeClassFolders(t, images, []string{"a/abbey", "a/apartment_building/outdoor", "b/bedroom"}, []int{4, 4, 4})
	d, err := Load("sun397", root, Options{NoWriteSplit: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"abbey", "outdoor apartment building", "bedroom"}
	if !slices.Equal(d.Classes, want) {
		t.Errorf("classes = %q, want %q", d.Classes, want)
	}
	if len(d.Train) != 6 || len(d.Val) != 3 || len(d.Test) != 3 {
		t.Errorf("sizes %d/%d/%d, want 6/3/3", len(d.Train), len(d.Val), len(d.Test))
	}
	if _, err := d.Test[0].Source.Load(); err != nil {
		t.Errorf("load generated item: %v", err)
	}
}

func TestCoOpGenerateTooFewImages(t *testing.T) {
	root := t.TempDir()
	writeClassFolders(t, filepath.Join(root, "dtd", "images"), []string{"banded", "dotted"}, []int{10, 3})
	_, err := Load("dtd", root, Options{NoWriteSplit: true})
	if err == nil || !strings.Contains(err.Error(), "dotted") {
		t.Fatalf("want an error naming the small class, got %v", err)
	}
}

func TestCoOpGeneratePets(t *testing.T) {
	root := t.TempDir()
	var trainval, test strings.Builder
	for _, b := range []struct {
		stem string
		id   int
	}{{"Abyssinian", 1}, {"american_bulldog", 2}} {
		for i := 1; i <= 10; i++ {
			fmt.Fprintf(&trainval, "%s_%d %d 1 1\n", b.stem, i, b.id)
			writeFile(t, root, fmt.Sprintf("oxford_pets/images/%s_%d.jpg", b.stem, i), pngBytes(t, 1))
		}
		fmt.Fprintf(&test, "%s_%d %d 1 1\n", b.stem, 100, b.id)
		writeFile(t, root, fmt.Sprintf("oxford_pets/images/%s_100.jpg", b.stem), pngBytes(t, 2))
	}
	writeFile(t, root, "oxford_pets/annotations/trainval.txt", []byte(trainval.String()))
	writeFile(t, root, "oxford_pets/annotations/test.txt", []byte("# comment\n"+test.String()))
	d, err := Load("oxford_pets", root, Options{NoWriteSplit: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"abyssinian", "american bulldog"}; !slices.Equal(d.Classes, want) {
		t.Errorf("classes = %q, want %q", d.Classes, want)
	}
	if len(d.Train) != 16 || len(d.Val) != 4 || len(d.Test) != 2 {
		t.Errorf("sizes %d/%d/%d, want 16/4/2", len(d.Train), len(d.Val), len(d.Test))
	}
	if d.Test[1].Key != "american_bulldog_100.jpg" || d.Test[1].Label != 1 {
		t.Errorf("test[1] = %+v", d.Test[1])
	}
	if _, err := d.Test[1].Source.Load(); err != nil {
		t.Errorf("load: %v", err)
	}
}

func TestCoOpMissing(t *testing.T) {
	root := t.TempDir()
	writeClassFolders(t, filepath.Join(root, "oxford_flowers", "jpg"), []string{"x"}, []int{1})
	if _, err := Load("oxford_flowers", root, Options{}); err == nil || !strings.Contains(err.Error(), "split_zhou_OxfordFlowers.json") {
		t.Errorf("flowers without split: got %v", err)
	}
	if _, err := Load("food101", root, Options{}); err == nil || !strings.Contains(err.Error(), "food-101") {
		t.Errorf("missing dataset folder: got %v", err)
	}
	writeFile(t, root, "dtd/split_zhou_DescribableTextures.json", []byte(`{"train": [["banded/a.png", 0, "banded"]], "val": [], "test": []}`))
	if _, err := Load("dtd", root, Options{}); err == nil || !strings.Contains(err.Error(), filepath.Join("dtd", "images")) {
		t.Errorf("missing images folder: got %v", err)
	}
}

// TestCoOpRootIsDatasetDir accepts DATA/dtd itself as the root.
func TestCoOpRootIsDatasetDir(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "images/banded/a.png", pngBytes(t, 1))
	writeFile(t, root, "split_zhou_DescribableTextures.json", []byte(`{"train": [["banded/a.png", 0, "banded"]], "val": [], "test": []}`))
	d, err := Load("dtd", root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	img, err := d.Train[0].Source.Load()
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds() != image.Rect(0, 0, 3, 2) {
		t.Errorf("bounds = %v", img.Bounds())
	}
}

func FuzzParseSplit(f *testing.F) {
	f.Add([]byte(`{"train": [["a.png", 0, "x"]], "val": [], "test": [["b.png", 1, "y"]]}`))
	f.Add([]byte(`{"train": [["a.png", "0", "x"]]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := parseSplit(b)
		if err != nil {
			return
		}
		for _, e := range slices.Concat(s.Train, s.Val, s.Test) {
			if e.Label < 0 || e.Path == "" || e.Class == "" {
				t.Fatalf("accepted bad entry %+v", e)
			}
		}
	})
}
