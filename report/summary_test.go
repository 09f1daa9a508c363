package report

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/eval"
)

// paperSummary is the "Average on 7 datasets" group of Table 1 (local, base,
// novel per method) with hm computed, in the paper's row order, which is not
// alphabetical.
func paperSummary() *Summary {
	s := &Summary{Protocol: "base2novel", Metrics: BaseToNovelMetrics}
	for _, r := range []struct {
		name    string
		l, b, n float64
	}{
		{"CLIP", 76.36, 76.81, 81.21},
		{"PromptFL", 88.93, 88.95, 75.36},
		{"FedPGP", 95.38, 76.49, 71.68},
		{"FedOTP", 97.34, 18.00, 36.69},
		{"pFedMoAP", 97.89, 61.82, 66.60},
		{"pFedMMA", 97.17, 77.40, 81.49},
	} {
		s.Set(r.name, eval.BaseToNovel(r.l, r.b, r.n))
	}
	return s
}

func TestSummaryRoundTrip(t *testing.T) {
	s := paperSummary()
	s.Config = map[string]any{"dataset": "dtd", "rounds": 50}
	s.Timings = map[string]float64{"train_s": 2175, "eval_s": math.NaN()}
	s.Extra = map[string]any{"seed": 1, "git": "abc123"}
	path := filepath.Join(t.TempDir(), SummaryFile)
	if err := WriteSummary(path, s); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSummary(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Protocol != s.Protocol || !slices.Equal(got.Metrics, s.Metrics) {
		t.Errorf("protocol/metrics = %q/%v, want %q/%v", got.Protocol, got.Metrics, s.Protocol, s.Metrics)
	}
	if len(got.Methods) != len(s.Methods) {
		t.Fatalf("%d methods, want %d", len(got.Methods), len(s.Methods))
	}
	for i, r := range s.Methods {
		g := got.Methods[i]
		if g.Method != r.Method {
			t.Errorf("method %d = %q, want %q (order lost)", i, g.Method, r.Method)
		}
		for _, k := range BaseToNovelMetrics {
			if g.Metrics[k] != r.Metrics[k] {
				t.Errorf("%s %s = %v, want %v", r.Method, k, g.Metrics[k], r.Metrics[k])
			}
		}
	}
	if cfg, ok := got.Config.(map[string]any); !ok || cfg["dataset"] != "dtd" || cfg["rounds"] != 50.0 {
		t.Errorf("config = %#v", got.Config)
	}
	if got.Timings["train_s"] != 2175 || !math.IsNaN(got.Timings["eval_s"]) {
		t.Errorf("timings = %v", got.Timings)
	}
	if got.Extra["seed"] != 1.0 || got.Extra["git"] != "abc123" || len(got.Extra) != 2 {
		t.Errorf("extra = %v", got.Extra)
	}

	// The file itself has the documented shape.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var generic struct {
		Protocol string                        `json:"protocol"`
		Methods  map[string]map[string]float64 `json:"methods"`
		Seed     int                           `json:"seed"`
	}
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatalf("summary.json is not plain JSON: %v", err)
	}
	if generic.Methods["pFedMMA"]["novel"] != 81.49 || generic.Seed != 1 {
		t.Errorf("generic decode = %+v", generic)
	}
	if strings.Index(string(raw), `"CLIP"`) > strings.Index(string(raw), `"PromptFL"`) {
		t.Error("methods not written in insertion order")
	}
}

func TestSummaryErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		s    *Summary
		want string
	}{
		{"extra clashes", &Summary{Protocol: "p", Extra: map[string]any{"methods": 1}}, `"methods" clashes`},
		{"duplicate method", &Summary{Methods: []MethodResult{{Method: "a"}, {Method: "a"}}}, `"a" listed twice`},
		{"unencodable config", &Summary{Config: func() {}}, "config"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".json")
			err := WriteSummary(path, tc.s)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error = %v, want one naming %s and %q", err, path, tc.want)
			}
			if _, statErr := os.Stat(path); !os.IsNotExist(statErr) {
				t.Errorf("failed write left %s behind", path)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("temporary files left: %v", entries)
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"methods":{"a":{"hm":"x"}}}`), 0o644)
	if _, err := ReadSummary(bad); err == nil || !strings.Contains(err.Error(), `method "a"`) {
		t.Errorf("ReadSummary(bad) error = %v", err)
	}
}

func TestSummarySetGetColumns(t *testing.T) {
	s := &Summary{}
	s.Set("b", Metrics{"avg": 3, "clipart": 1})
	s.Set("a", Metrics{"real": 2})
	s.Set("b", Metrics{"avg": 4, "clipart": 1})
	if len(s.Methods) != 2 || s.Methods[0].Method != "b" {
		t.Errorf("Set reordered or duplicated: %v", s.Methods)
	}
	if m, ok := s.Get("b"); !ok || m["avg"] != 4 {
		t.Errorf("Get(b) = %v, %v", m, ok)
	}
	if _, ok := s.Get("zzz"); ok {
		t.Error("Get of a missing method succeeded")
	}
	if got, want := s.Columns(), []string{"clipart", "real", "avg"}; !slices.Equal(got, want) {
		t.Errorf("Columns() = %v, want %v", got, want)
	}
}

func TestAverage(t *testing.T) {
	a := &Summary{Protocol: "b2n", Metrics: BaseToNovelMetrics}
	a.Set("clip", eval.BaseToNovel(60, 70, 80))
	a.Set("pfedmma", eval.BaseToNovel(90, 70, 80))
	a.Set("only-a", eval.BaseToNovel(1, 1, 1))
	b := &Summary{Protocol: "b2n"}
	b.Set("pfedmma", eval.BaseToNovel(94, 72, 70))
	b.Set("clip", Metrics{"local": 62, "base": 72, "novel": 82})
	avg, err := Average("avg2", a, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(avg.Methods) != 2 || avg.Methods[0].Method != "clip" || avg.Methods[1].Method != "pfedmma" {
		t.Fatalf("methods = %v", avg.Methods)
	}
	clip := avg.Methods[0].Metrics
	if clip["local"] != 61 || clip["novel"] != 81 {
		t.Errorf("clip = %v", clip)
	}
	if _, ok := clip["hm"]; ok {
		t.Error("hm averaged although one summary lacks it")
	}
	p := avg.Methods[1].Metrics
	if want := (eval.HM(90, 70, 80) + eval.HM(94, 72, 70)) / 2; math.Abs(p["hm"]-want) > 1e-12 {
		t.Errorf("pfedmma hm = %v, want mean of per-summary hm %v", p["hm"], want)
	}
	if _, err := Average("x"); err == nil {
		t.Error("Average of nothing succeeded")
	}
	c := &Summary{}
	c.Set("other", Metrics{"acc": 1})
	if _, err := Average("x", a, c); err == nil {
		t.Error("Average with no common method succeeded")
	}
}
