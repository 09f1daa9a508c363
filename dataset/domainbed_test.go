package dataset

import (
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeDomainBed writes ROOT/office_home/<domain>/<class>/<n>.png.
func writeDomainBed(t *testing.T, domains, classes []string, perClass int) string {
	t.Helper()
	root := t.TempDir()
	for di, d := range domains {
		for ci, c := range classes {
			dir := filepath.Join(root, "office_home", d, c)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < perClass; i++ {
				img := image.NewRGBA(image.Rect(0, 0, 4, 4))
				img.Set(0, 0, color.RGBA{uint8(di), uint8(ci), uint8(i), 255})
				f, err := os.Create(filepath.Join(dir, string(rune('a'+i))+".png"))
				if err != nil {
					t.Fatal(err)
				}
				if err := png.Encode(f, img); err != nil {
					t.Fatal(err)
				}
				f.Close()
			}
		}
	}
	return root
}

func TestDomainBed(t *testing.T) {
	domains := []string{"Art", "Clipart", "Product", "Real World"}
	root := writeDomainBed(t, domains, []string{"Alarm_Clock", "Bike"}, 10)
	d, err := Load("office_home", root, Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Domains) != 4 || d.Domains[3] != "Real World" || len(d.Classes) != 2 || d.Classes[0] != "Alarm Clock" {
		t.Fatalf("domains %v classes %v", d.Domains, d.Classes)
	}
	if len(d.Test) != 4*2*2 || len(d.Train) != 4*2*8 {
		t.Fatalf("%d train, %d test; want 64 and 16 (20%% held out per domain and class)", len(d.Train), len(d.Test))
	}
	again, err := Load("office_home", root, Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	other, err := Load("office_home", root, Options{Seed: 8})
	if err != nil {
		t.Fatal(err)
	}
	same, differ := true, false
	for i := range d.Test {
		same = same && d.Test[i].Key == again.Test[i].Key
		differ = differ || d.Test[i].Key != other.Test[i].Key
	}
	if !same || !differ {
		t.Errorf("held-out split: same seed same split %v, another seed another split %v", same, differ)
	}
	img, err := d.Train[0].Source.Load()
	if err != nil || img.Bounds().Dx() != 4 {
		t.Fatalf("image: %v", err)
	}
	// a domain subset, and a missing domain named with what was found
	sub, err := Load("office_home", root, Options{Seed: 7, Domains: []string{"Clipart"}})
	if err != nil || len(sub.Domains) != 1 || len(sub.Test) != 4 {
		t.Fatalf("subset: %v", err)
	}
	if _, err := Load("office_home", root, Options{Domains: []string{"Sketch"}}); err == nil || !strings.Contains(err.Error(), "Real World") || !strings.Contains(err.Error(), "Sketch") {
		t.Errorf("missing domain: %v", err)
	}
	if _, err := Load("pacs", root, Options{}); err == nil || !strings.Contains(err.Error(), "PACS") {
		t.Errorf("missing dataset folder: %v", err)
	}
	if err := os.RemoveAll(filepath.Join(root, "office_home", "Product", "Bike")); err != nil {
		t.Fatal(err)
	}
	if _, err := Load("office_home", root, Options{}); err == nil || !strings.Contains(err.Error(), "Bike") {
		t.Errorf("domain without a class: %v", err)
	}
}
