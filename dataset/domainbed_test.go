package dataset

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// dbJPEG is a tiny JPEG shared by the generated trees.
var dbJPEG = func() []byte {
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	for i := range 16 {
		img.Set(i%4, i/4, color.RGBA{uint8(16 * i), 80, 200, 255})
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, nil); err != nil {
		panic(err)
	}
	return buf.Bytes()
}()

// dbTree writes root/<dir>/<domain>/<class>/img_NN.jpg, n images per class.
func dbTree(t *testing.T, root, dir string, domains, classes []string, n int) {
	t.Helper()
	for _, d := range domains {
		for _, c := range classes {
			cdir := filepath.Join(root, dir, d, c)
			if err := os.MkdirAll(cdir, 0o755); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if err := os.WriteFile(filepath.Join(cdir, fmt.Sprintf("img_%02d.jpg", i)), dbJPEG, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// splitOf maps each key to "train" or "test".
func splitOf(d *Dataset) map[string]string {
	out := map[string]string{}
	for _, it := range d.Train {
		out[it.Key] = "train"
	}
	for _, it := range d.Test {
		out[it.Key] = "test"
	}
	return out
}

func TestDomainBedPresetsSorted(t *testing.T) {
	// ImageFolder numbers classes by sorted folder name; DomainBed sorts
	// the environment folders.
	for name, l := range map[string][]string{
		"pacs classes": PACSClasses, "office_home classes": OfficeHomeClasses, "vlcs classes": VLCSClasses,
		"terra classes": TerraIncognitaClasses, "pacs domains": PACSDomains, "office_home domains": OfficeHomeDomains,
		"vlcs domains": VLCSDomains, "terra domains": TerraIncognitaDomains,
	} {
		if !slices.IsSorted(l) {
			t.Errorf("%s not sorted: %q", name, l)
		}
	}
	if len(OfficeHomeClasses) != 65 {
		t.Errorf("Office-Home has %d classes, want 65", len(OfficeHomeClasses))
	}
}

func TestOfficeHomeRealWorld(t *testing.T) {
	root := t.TempDir()
	dbTree(t, root, "office_home", OfficeHomeDomains, OfficeHomeClasses, 5)
	d, err := Load("office_home", root, Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Domains, OfficeHomeDomains) || len(d.Classes) != 65 || d.Classes[0] != "Alarm Clock" {
		t.Fatalf("domains %q, %d classes, first %q", d.Domains, len(d.Classes), d.Classes[0])
	}
	// 5 images per folder: round(5·0.2) = 1 held out per (domain, class).
	if want := 4 * 65; len(d.Test) != want || len(d.Train) != 4*want {
		t.Fatalf("%d train / %d test, want %d / %d", len(d.Train), len(d.Test), 4*want, want)
	}
	perCell := map[[2]int]int{}
	var real *Item
	for i, it := range d.Test {
		perCell[[2]int{it.Domain, it.Label}]++
		if d.Domains[it.Domain] == "Real World" && real == nil {
			real = &d.Test[i]
		}
	}
	for k, n := range perCell {
		if n != 1 {
			t.Fatalf("domain %d class %d: %d test images, want 1", k[0], k[1], n)
		}
	}
	if real == nil || !strings.HasPrefix(real.Key, "Real World/") {
		t.Fatalf("no Real World test item (%v)", real)
	}
	img, err := real.Source.Load()
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds().Dx() != 4 {
		t.Fatalf("decoded %v", img.Bounds())
	}
}

func TestDomainBedFolderVariants(t *testing.T) {
	root := t.TempDir()
	classes := slices.Clone(OfficeHomeClasses)
	classes[slices.Index(classes, "ToothBrush")] = "Toothbrush"
	dbTree(t, root, "OfficeHomeDataset_10072016", []string{"Art", "Clipart", "Product", "Real_World"}, classes, 1)
	d, err := LoadOfficeHome(root, Options{Domains: []string{"real world", "Art"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Domains, []string{"Real World", "Art"}) {
		t.Fatalf("domains %q", d.Domains)
	}
	if !strings.HasPrefix(d.Train[0].Key, "Real_World/") || d.Train[0].Domain != 0 {
		t.Fatalf("first item %q in domain %d", d.Train[0].Key, d.Train[0].Domain)
	}
	if len(d.Test) != 0 { // round(1·0.2) = 0
		t.Fatalf("%d test images from single-image folders", len(d.Test))
	}
}

func TestDomainBedHoldOutDeterminism(t *testing.T) {
	root := t.TempDir()
	dbTree(t, root, "PACS", PACSDomains, PACSClasses, 10)
	a, err := Load("pacs", root, Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load("pacs", root, Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load("pacs", root, Options{Seed: 8})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := Load("pacs", root, Options{Seed: 7, Domains: []string{"sketch"}})
	if err != nil {
		t.Fatal(err)
	}
	sa, sb, sc, ss := splitOf(a), splitOf(b), splitOf(c), splitOf(sub)
	if len(a.Test) != 4*7*2 {
		t.Fatalf("%d test images, want 2 per folder", len(a.Test))
	}
	diff := 0
	for k, v := range sa {
		if sb[k] != v {
			t.Fatalf("%s: %s then %s with the same seed", k, v, sb[k])
		}
		if sc[k] != v {
			diff++
		}
		if strings.HasPrefix(k, "sketch/") && ss[k] != v {
			t.Fatalf("%s: %s with all domains, %s with sketch alone", k, v, ss[k])
		}
	}
	if diff == 0 {
		t.Fatal("seeds 7 and 8 hold out the same images")
	}
	if len(ss) != 7*10 {
		t.Fatalf("sketch alone: %d items", len(ss))
	}
}

func TestDomainBedOthers(t *testing.T) {
	for _, c := range []struct {
		name, dir        string
		domains, classes []string
	}{
		{"vlcs", "VLCS", VLCSDomains, VLCSClasses},
		{"terra_incognita", "terra_incognita", TerraIncognitaDomains, TerraIncognitaClasses},
	} {
		root := t.TempDir()
		dbTree(t, root, c.dir, c.domains, c.classes, 3)
		d, err := Load(c.name, root, Options{Seed: 1, ValFraction: 0.5})
		if err != nil {
			t.Fatal(err)
		}
		n := len(c.domains) * len(c.classes)
		if len(d.Test) != n || len(d.Val) != n || len(d.Train) != n {
			t.Fatalf("%s: %d/%d/%d train/val/test, want %d each", c.name, len(d.Train), len(d.Val), len(d.Test), n)
		}
	}
}

func TestDomainBedErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(root string)
		opts  Options
		want  []string
	}{
		{"no dataset folder", func(root string) { os.MkdirAll(filepath.Join(root, "other"), 0o755) }, Options{},
			[]string{"no folder", `"PACS"`, `"other"`}},
		{"missing domain", func(root string) { os.RemoveAll(filepath.Join(root, "PACS", "sketch")) }, Options{},
			[]string{filepath.Join("PACS") + ":", `missing ["sketch"]`, `"art_painting" "cartoon" "photo"`}},
		{"extra domain", func(root string) { os.MkdirAll(filepath.Join(root, "PACS", "clipart", "dog"), 0o755) }, Options{},
			[]string{`unexpected ["clipart"]`}},
		{"missing class", func(root string) { os.RemoveAll(filepath.Join(root, "PACS", "photo", "horse")) }, Options{},
			[]string{filepath.Join("PACS", "photo") + ":", `missing ["horse"]`, `"guitar" "house"`}},
		{"extra class", func(root string) { os.MkdirAll(filepath.Join(root, "PACS", "cartoon", "cat"), 0o755) }, Options{},
			[]string{filepath.Join("PACS", "cartoon") + ":", `unexpected ["cat"]`}},
		{"empty class", func(root string) {
			os.RemoveAll(filepath.Join(root, "PACS", "photo", "dog"))
			os.MkdirAll(filepath.Join(root, "PACS", "photo", "dog"), 0o755)
		}, Options{}, []string{filepath.Join("PACS", "photo", "dog") + ": no images"}},
		{"unknown domain", func(string) {}, Options{Domains: []string{"clipart"}}, []string{`domain "clipart"`, "art_painting"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			if c.name != "no dataset folder" {
				dbTree(t, root, "PACS", PACSDomains, PACSClasses, 2)
			}
			c.setup(root)
			_, err := Load("pacs", root, c.opts)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
