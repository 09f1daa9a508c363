package report

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLODORoundTrip: matrices with missing entries (NaN) survive the file,
// and a malformed file is refused naming the method.
func TestLODORoundTrip(t *testing.T) {
	doms := []string{"a", "b", "c"}
	m, err := NewLODOMatrix("x", doms, []Fold{{HeldOut: "a", Global: 50, Personal: map[string]float64{"b": 70, "c": 80}},
		{HeldOut: "b", Global: math.NaN(), Personal: map[string]float64{"a": 60}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), LODOFile)
	if err := WriteLODO(path, LODORun{Dataset: "d", Protocol: "leave_one_domain_out", Domains: doms, Matrices: []LODOMatrix{m}}); err != nil {
		t.Fatal(err)
	}
	r, err := ReadLODO(path)
	if err != nil {
		t.Fatal(err)
	}
	got := r.Matrices[0]
	for i := range m.A {
		for k := range m.A[i] {
			a, b := m.A[i][k], got.A[i][k]
			if a != b && !(math.IsNaN(a) && math.IsNaN(b)) {
				t.Fatalf("A[%d][%d] = %v, want %v", i, k, b, a)
			}
		}
	}
	if g, w := got.GPC(), m.GPC(); g["G"] != w["G"] || g["P"] != w["P"] || g["C"] != w["C"] {
		t.Fatalf("G/P/C %v, want %v", g, w)
	}
	doc := r.Document("")
	if len(doc.Tables) != 2 || !strings.Contains(doc.Markdown(), "## x") {
		t.Fatalf("document: %s", doc.Markdown())
	}
	bad := `{"dataset":"d","domains":["a","b"],"methods":[{"method":"y","a":[[1,2]]}]}`
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLODO(path); err == nil || !strings.Contains(err.Error(), `method "y"`) {
		t.Fatalf("malformed file: %v", err)
	}
}
