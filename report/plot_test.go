package report

import (
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/eval"
)

func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return img
}

// colours counts the distinct colours of img, a cheap check that something
// was drawn.
func colours(img image.Image) int {
	seen := map[color.RGBA]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bb, a := img.At(x, y).RGBA()
			seen[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bb >> 8), uint8(a >> 8)}] = true
		}
	}
	return len(seen)
}

func TestLearningCurves(t *testing.T) {
	recs := append(roundRecords("pfedmma", 5), roundRecords("promptfl", 5)...)
	for i := range recs {
		recs[i].Mean = eval.MeanOf(recs[i].Clients[0].Metrics, recs[i].Clients[1].Metrics)
	}
	c := LearningCurves(recs, "hm", "local")
	if len(c.Series) != 4 {
		t.Fatalf("%d series, want 4 (2 methods × 2 metrics)", len(c.Series))
	}
	if c.Series[0].Name != "pfedmma HM" || c.Series[3].Name != "promptfl Local" {
		t.Errorf("series names = %q, %q", c.Series[0].Name, c.Series[3].Name)
	}
	s := c.Series[0]
	if len(s.X) != 5 || s.X[4] != 5 || s.Y[4] != recs[4].Mean["hm"] {
		t.Errorf("series = %+v", s)
	}
	one := LearningCurves(recs[:5])
	if len(one.Series) != 4 || one.Series[0].Name != "Local" || one.Series[3].Name != "HM" {
		t.Errorf("single-method default series = %v", one.Series)
	}

	for _, size := range [][2]int{{640, 480}, {333, 201}} {
		path := filepath.Join(t.TempDir(), "curves.png")
		if err := c.WritePNG(path, size[0], size[1]); err != nil {
			t.Fatal(err)
		}
		img := decodePNG(t, path)
		if b := img.Bounds(); b.Dx() != size[0] || b.Dy() != size[1] {
			t.Errorf("image %dx%d, want %dx%d", b.Dx(), b.Dy(), size[0], size[1])
		}
		if n := colours(img); n < 5 {
			t.Errorf("image has %d colours; lines not drawn?", n)
		}
	}
}

func TestBarChart(t *testing.T) {
	s := paperSummary()
	s.Set("partial", Metrics{"local": 50})
	c := s.BarChart("Final accuracy")
	if len(c.Groups) != len(s.Methods) || len(c.Bars) != 4 || c.Bars[3].Name != "HM" {
		t.Fatalf("chart = %+v", c)
	}
	if !math.IsNaN(c.Bars[1].Values[len(s.Methods)-1]) {
		t.Errorf("missing metric became %v, want NaN", c.Bars[1].Values[len(s.Methods)-1])
	}
	path := filepath.Join(t.TempDir(), "final.png")
	if err := c.WritePNG(path, 800, 400); err != nil {
		t.Fatal(err)
	}
	img := decodePNG(t, path)
	if b := img.Bounds(); b.Dx() != 800 || b.Dy() != 400 {
		t.Errorf("image %dx%d, want 800x400", b.Dx(), b.Dy())
	}
	if n := colours(img); n < 5 {
		t.Errorf("image has %d colours; bars not drawn?", n)
	}
}

func TestPlotErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		draw func(path string) error
		want string
	}{
		{"zero width", func(p string) error { return LineChart{}.WritePNG(p, 0, 10) }, "out of range"},
		{"huge", func(p string) error { return paperSummary().BarChart("x").WritePNG(p, 10, 1e6) }, "out of range"},
		{"ragged series", func(p string) error {
			return LineChart{Series: []Series{{Name: "s", X: []float64{1, 2}, Y: []float64{1}}}}.WritePNG(p, 100, 100)
		}, `series "s"`},
		{"ragged bars", func(p string) error {
			return BarChart{Groups: []string{"a", "b"}, Bars: []BarSeries{{Name: "m", Values: []float64{1}}}}.WritePNG(p, 100, 100)
		}, `bars "m"`},
		{"empty bars", func(p string) error { return BarChart{}.WritePNG(p, 100, 100) }, "without groups"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".png")
			err := tc.draw(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error = %v, want one naming %s and %q", err, path, tc.want)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed plots left files: %v", entries)
	}
}

func TestPlotDegenerateData(t *testing.T) {
	tests := []struct {
		name  string
		chart LineChart
	}{
		{"no series", LineChart{Title: "empty"}},
		{"all NaN", LineChart{Series: []Series{{Name: "nan", X: []float64{1, 2}, Y: []float64{math.NaN(), math.Inf(1)}}}}},
		{"single point", LineChart{Series: []Series{{Name: "one", X: []float64{3}, Y: []float64{42}}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.png")
			if err := tc.chart.WritePNG(path, 200, 150); err != nil {
				t.Fatalf("WritePNG: %v", err)
			}
			if b := decodePNG(t, path).Bounds(); b.Dx() != 200 || b.Dy() != 150 {
				t.Errorf("image %dx%d, want 200x150", b.Dx(), b.Dy())
			}
		})
	}
}
