package world

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

func TestContactSheet(t *testing.T) {
	w, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	const rows, size = 6, 48
	sheet := w.ContactSheet(rows, size)
	b := sheet.Bounds()
	if b.Dx() != NumDomains*(size+2)+2 || b.Dy() != rows*(size+2)+2 {
		t.Fatalf("sheet bounds %v", b)
	}
	dir := t.TempDir()
	if p := os.Getenv("WORLD_CONTACT"); p != "" {
		dir = p
	}
	f, err := os.Create(filepath.Join(dir, "contact.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := png.Encode(f, sheet); err != nil {
		t.Fatal(err)
	}
	// every tile must differ from the white gutter somewhere.
	for row := range rows {
		for d := range NumDomains {
			x0, y0 := 2+d*(size+2), 2+row*(size+2)
			nonWhite := 0
			for y := y0; y < y0+size; y++ {
				for x := x0; x < x0+size; x++ {
					c := sheet.RGBAAt(x, y)
					if c.R < 240 || c.G < 240 || c.B < 240 {
						nonWhite++
					}
				}
			}
			if nonWhite < size*size/20 {
				t.Errorf("tile row %d domain %d nearly blank: %d non-white pixels", row, d, nonWhite)
			}
		}
	}
}
