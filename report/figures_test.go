package report

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/eval"
)

func TestFigures(t *testing.T) {
	dir := t.TempDir()
	var recs []RoundRecord
	recs = append(recs, RoundRecord{Round: 0, Method: "zeroshot", Mean: eval.BaseToNovel(70, 70, 80)})
	for r := 0; r < 4; r++ {
		recs = append(recs, RoundRecord{Round: r, Method: "pfedmma", Mean: eval.BaseToNovel(70+float64(r), 69, 80)})
		recs = append(recs, RoundRecord{Round: r, Method: "promptfl", Mean: eval.BaseToNovel(71+float64(r), 72, 81)})
	}
	base := filepath.Join(dir, "curves")
	if err := WriteCurves(base, "world — base2novel", recs, BaseToNovelMetrics, nil, 1200, 400); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, base+".png", 1200, 400)
	svg, err := os.ReadFile(base + ".svg")
	if err != nil || !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("promptfl")) || !bytes.Contains(svg, []byte("world")) {
		t.Fatalf("svg: %v, %d bytes, legend or title missing", err, len(svg))
	}
	s := &Summary{Protocol: "base2novel", Metrics: BaseToNovelMetrics}
	s.Set("zeroshot", eval.BaseToNovel(70, 70, 80))
	s.Set("pfedmma", eval.BaseToNovel(90.47, 69.19, 85.82))
	if err := WriteBars(filepath.Join(dir, "final"), "final", s, 1200, 400); err != nil {
		t.Fatal(err)
	}
	bars, _ := os.ReadFile(filepath.Join(dir, "final.svg"))
	if !bytes.Contains(bars, []byte("90.5")) {
		t.Error("bar values are not printed")
	}
	s2 := &Summary{Protocol: "base2novel", Metrics: BaseToNovelMetrics}
	s2.Set("zeroshot", eval.BaseToNovel(60, 60, 60))
	s2.Set("pfedmma", eval.BaseToNovel(80, 70, 75))
	if err := WriteRadar(filepath.Join(dir, "radar"), "datasets", "hm", []string{"a", "b", "c"}, []*Summary{s, s2, s}, 800, 600); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, filepath.Join(dir, "radar.png"), 800, 600)
	if err := WriteRadar(filepath.Join(dir, "r2"), "x", "hm", []string{"a", "b"}, []*Summary{s, s2}, 800, 600); err == nil || !strings.Contains(err.Error(), "three") {
		t.Errorf("radar of two datasets: %v", err)
	}
}

// TestColoursByPosition: a method's colour is the one of its position in the
// table's order, whatever its name; positions take distinct colours.
func TestColoursByPosition(t *testing.T) {
	a := &methodColors{order: []string{"pfedmma", "promptfl"}}
	b := &methodColors{order: []string{"promptfl", "pfedmma"}}
	if a.of("pfedmma") != PositionColor(0) || a.of("promptfl") != PositionColor(1) {
		t.Error("colours do not follow the order")
	}
	if b.of("pfedmma") != PositionColor(1) || b.of("promptfl") != PositionColor(0) {
		t.Error("a method keeps a colour by name across orders")
	}
	if first, again := a.of("x1"), a.of("x1"); first != PositionColor(2) || again != first {
		t.Error("a method outside the order does not take the next position, once")
	}
	for i := 0; i < len(palette); i++ {
		for j := i + 1; j < len(palette); j++ {
			if PositionColor(i) == PositionColor(j) {
				t.Errorf("positions %d and %d share a colour", i, j)
			}
		}
	}
}

func TestAverageStd(t *testing.T) {
	a, b := &Summary{}, &Summary{}
	a.Set("m", Metrics{"acc": 80})
	b.Set("m", Metrics{"acc": 84})
	avg, err := Average("dirichlet", a, b)
	if err != nil {
		t.Fatal(err)
	}
	r := avg.Methods[0]
	if r.Metrics["acc"] != 82 || r.Std["acc"] < 2.828 || r.Std["acc"] > 2.829 {
		t.Fatalf("mean %v std %v", r.Metrics, r.Std)
	}
	if txt := avg.Table("t").Text(); !strings.Contains(txt, "82.00 ± 2.83") {
		t.Errorf("table lacks mean ± std:\n%s", txt)
	}
	js, err := avg.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Summary
	if err := back.UnmarshalJSON(js); err != nil || back.Methods[0].Std["acc"] != r.Std["acc"] {
		t.Fatalf("std does not round-trip: %s %v", js, err)
	}
}

func checkPNG(t *testing.T, path string, w, h int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Fatalf("%s is %dx%d", path, b.Dx(), b.Dy())
	}
}
