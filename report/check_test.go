package report

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const fuzzGoodMetrics = `{"round":0,"method":"zeroshot","mean":{"local":60,"base":60,"novel":60,"hm":60}}
{"round":0,"method":"pfedmma","seconds":0.5,"mean":{"local":80,"loss":0.3},"clients":[{"id":0,"metrics":{"local":80,"loss":0.3}}]}
{"round":1,"method":"pfedmma","mean":{"local":"NaN","loss":0.2}}
`

// FuzzReadMetricsChecked: reading any bytes as metrics.jsonl for report
// never panics; errors name the file; what is accepted has rounds in
// [0, MaxRound] increasing per method and every metric in range.
func FuzzReadMetricsChecked(f *testing.F) {
	f.Add([]byte(fuzzGoodMetrics))
	f.Add([]byte(strings.Replace(fuzzGoodMetrics, `"local":80`, `"local":1e308`, 1)))
	f.Add([]byte(strings.Replace(fuzzGoodMetrics, `"round":1`, `"round":-5`, 1)))
	f.Add([]byte(fuzzGoodMetrics[:len(fuzzGoodMetrics)-20]))
	f.Add([]byte(`{"round":0,"mean":{"acc":-1e9}}`))
	f.Add([]byte("\n\n{}\n"))
	f.Add([]byte(`{"round":0,"clients":[{"id":1},{"id":1}]}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, MetricsJSONL)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		recs, err := ReadMetricsChecked(p)
		if err != nil {
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		last := map[string]int{}
		for _, r := range recs {
			if r.Round < 0 || r.Round > MaxRound {
				t.Fatalf("accepted round %d", r.Round)
			}
			if prev, ok := last[r.Method]; ok && r.Round <= prev {
				t.Fatalf("accepted round %d after %d", r.Round, prev)
			}
			last[r.Method] = r.Round
			ms := []Metrics{r.Mean}
			for _, c := range r.Clients {
				ms = append(ms, c.Metrics)
			}
			for _, m := range ms {
				for k, v := range m {
					if math.IsInf(v, 0) || (!math.IsNaN(v) && (v < 0 || (v > 100 && !strings.Contains(k, "loss")))) {
						t.Fatalf("accepted %s = %v", k, v)
					}
				}
			}
		}
	})
}

// TestReadMetricsChecked: the intact log reads whole (so the fuzz target's
// checks are not refusing everything), and ReadMetricsJSONL, which
// resuming uses, still skips a truncated last line that report refuses.
func TestReadMetricsChecked(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, MetricsJSONL)
	if err := os.WriteFile(p, []byte(fuzzGoodMetrics), 0o644); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadMetricsChecked(p)
	if err != nil || len(recs) != 3 || recs[1].Mean["loss"] != 0.3 {
		t.Fatalf("got %v, %v", recs, err)
	}
	if err := os.WriteFile(p, []byte(fuzzGoodMetrics+`{"round":2,"method":"pf`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadMetricsChecked(p); err == nil || !strings.Contains(err.Error(), "line 4") {
		t.Errorf("truncated last line: %v", err)
	}
	if recs, err := ReadMetricsJSONL(p); err != nil || len(recs) != 3 {
		t.Errorf("ReadMetricsJSONL (resume): %d records, %v; want the 3 whole ones", len(recs), err)
	}
}

// FuzzSummaryCheck: reading any bytes as summary.json and checking it
// never panics; what passes has named methods and metrics in range.
func FuzzSummaryCheck(f *testing.F) {
	f.Add([]byte(`{"protocol":"base2novel","metrics":["local","hm"],"methods":{"pfedmma":{"local":90,"hm":80}},"std":{"pfedmma":{"local":1}}}`))
	f.Add([]byte(`{"methods":{"pfedmma":{"local":1e308}}}`))
	f.Add([]byte(`{"methods":{"":{"local":5}}}`))
	f.Add([]byte(`{"methods":{"a":{"loss":-1}},"std":{"a":{"loss":"+Inf"}}}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, SummaryFile)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := ReadSummary(p)
		if err != nil {
			return
		}
		if s.Check() != nil {
			return
		}
		for _, m := range s.Methods {
			if strings.TrimSpace(m.Method) == "" {
				t.Fatal("accepted an unnamed method")
			}
			for k, v := range m.Metrics {
				if CheckMetric(k, v) != nil {
					t.Fatalf("accepted %s = %v", k, v)
				}
			}
		}
	})
}

// TestReadLODORefusesOutOfRange: a lodo.json accuracy outside [0, 100] is
// refused naming the file, the method and the cell.
func TestReadLODORefusesOutOfRange(t *testing.T) {
	p := filepath.Join(t.TempDir(), LODOFile)
	doms := []string{"photo", "sketch"}
	good := LODORun{Dataset: "world", Protocol: "lodo", Domains: doms,
		Matrices: []LODOMatrix{{Method: "fedot", Domains: doms, A: [][]float64{{80, 70}, {60, 90}}}}}
	if err := WriteLODO(p, good); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLODO(p); err != nil {
		t.Fatalf("intact file: %v", err)
	}
	for _, v := range []float64{1e308, -1e9} {
		bad := good
		bad.Matrices = []LODOMatrix{{Method: "fedot", Domains: doms, A: [][]float64{{80, 70}, {v, 90}}}}
		if err := WriteLODO(p, bad); err != nil {
			t.Fatal(err)
		}
		_, err := ReadLODO(p)
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "fedot") || !strings.Contains(err.Error(), "sketch") {
			t.Errorf("accuracy %v: error %v, want one naming the file, method and domain", v, err)
		}
	}
}

// TestCheckMetricPrivacyBudget: differential privacy's ε per round
// (dp_epsilon) is a budget, not a percentage: above 100 is a real value,
// negative is not.
func TestCheckMetricPrivacyBudget(t *testing.T) {
	if err := CheckMetric("dp_epsilon", 1234.5); err != nil {
		t.Errorf("ε 1234.5: %v", err)
	}
	if err := CheckMetric("dp_epsilon", -1); err == nil {
		t.Error("ε -1 accepted")
	}
	if err := CheckMetric("local", 1234.5); err == nil {
		t.Error("an accuracy of 1234.5 accepted")
	}
}
