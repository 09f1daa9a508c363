package report

import (
	"math"
	"strings"
	"testing"
)

// lodoFolds are 3-domain folds with distinct values: the global accuracy of
// fold i is 10·(i+1), domain j's personal accuracy in fold i is 50+10i+j.
func lodoFolds(domains []string, global bool) []Fold {
	var out []Fold
	for i, h := range domains {
		f := Fold{HeldOut: h, Global: math.NaN(), Personal: map[string]float64{}}
		if global {
			f.Global = float64(10 * (i + 1))
		}
		for j, d := range domains {
			if j != i {
				f.Personal[d] = float64(50 + 10*i + j)
			}
		}
		out = append(out, f)
	}
	return out
}

func TestLODOMatrixGPC(t *testing.T) {
	domains := []string{"A", "C", "Real World"}
	m, err := NewLODOMatrix("fedot", domains, lodoFolds(domains, true))
	if err != nil {
		t.Fatal(err)
	}
	var g, p, all []float64
	for i := range domains {
		for j := range domains {
			v := float64(50 + 10*i + j)
			if i == j {
				v = float64(10 * (i + 1))
				g = append(g, v)
			} else {
				p = append(p, v)
			}
			all = append(all, v)
			if m.A[i][j] != v {
				t.Fatalf("A[%d][%d] = %g, want %g", i, j, m.A[i][j], v)
			}
		}
	}
	gpc := m.GPC()
	if gpc["G"] != lodoMean(g) || gpc["P"] != lodoMean(p) || gpc["C"] != lodoMean(all) {
		t.Fatalf("GPC %v", gpc)
	}
	gen := m.Generalization()
	if gen["Real World"] != 30 || gen["avg"] != lodoMean(g) {
		t.Fatalf("generalisation %v", gen)
	}
	md := m.Markdown()
	for _, want := range []string{"| Real World | 70.00 | 71.00 | *30.00* |", "G 20.00"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	// A method without a global model (FedOT All Local): P only.
	local, err := NewLODOMatrix("local", domains, lodoFolds(domains, false))
	if err != nil {
		t.Fatal(err)
	}
	if gpc := local.GPC(); len(gpc) != 1 || gpc["P"] != lodoMean(p) {
		t.Fatalf("local GPC %v", gpc)
	}
	tab := GPCTable("PACS", []LODOMatrix{m, local})
	if txt := tab.Text(); !strings.Contains(txt, "local") || !strings.Contains(tab.Markdown(), "| local | - |") {
		t.Fatalf("GPC table:\n%s", tab.Markdown())
	}
	gt := GeneralizationTable("gen", []LODOMatrix{m})
	if len(gt.Columns) != 4 || gt.Columns[3] != "avg" || gt.Rows[0].Metrics["A"] != 10 {
		t.Fatalf("generalisation table %+v", gt)
	}
	multi := GPCTableMulti("all", []string{"PACS", "VLCS"}, map[string][]LODOMatrix{"PACS": {m}, "VLCS": {local}})
	r := multi.Rows[0].Metrics
	if len(multi.Rows) != 2 || r["PACS G"] != gpc["G"] || r["Average G"] != gpc["G"] || multi.Rows[1].Metrics["Average P"] != lodoMean(p) {
		t.Fatalf("multi %+v", multi.Rows)
	}
}

func TestLODOMatrixErrors(t *testing.T) {
	domains := []string{"A", "B"}
	for name, folds := range map[string][]Fold{
		"unknown held-out": {{HeldOut: "Z"}},
		"twice":            {{HeldOut: "A"}, {HeldOut: "A"}},
		"personal on held": {{HeldOut: "A", Personal: map[string]float64{"A": 1}}},
		"unknown personal": {{HeldOut: "A", Personal: map[string]float64{"Q": 1}}},
	} {
		if _, err := NewLODOMatrix("m", domains, folds); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// One fold only: the other row stays empty.
	m, err := NewLODOMatrix("m", domains, []Fold{{HeldOut: "B", Global: 40, Personal: map[string]float64{"A": 80}}})
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(m.A[0][0]) || m.GPC()["C"] != 60 {
		t.Fatalf("single fold: %v, %v", m.A, m.GPC())
	}
}

func TestDatasetTable(t *testing.T) {
	a := &Summary{Methods: []MethodResult{{Method: "pfedmoap", Metrics: Metrics{"acc": 90}}, {Method: "promptfl", Metrics: Metrics{"acc": 70}}}}
	b := &Summary{Methods: []MethodResult{{Method: "pfedmoap", Metrics: Metrics{"acc": 80}}}}
	tab := DatasetTable("pathological", "acc", []string{"dtd", "oxford_pets", "food101"}, map[string]*Summary{"dtd": a, "oxford_pets": b})
	if len(tab.Rows) != 2 || tab.Rows[0].Metrics["avg"] != 85 || tab.Rows[1].Metrics["avg"] != 70 {
		t.Fatalf("rows %+v", tab.Rows)
	}
	if _, ok := tab.Rows[1].Metrics["oxford_pets"]; ok {
		t.Fatal("promptfl has an oxford_pets cell")
	}
}
