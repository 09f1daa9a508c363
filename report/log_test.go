package report

import (
	"encoding/csv"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/eval"
)

// roundRecords returns rounds of a two-client base-to-novel run whose
// metrics follow simple formulas, so expectations are computed, not copied.
func roundRecords(method string, rounds int) []RoundRecord {
	var out []RoundRecord
	for r := 1; r <= rounds; r++ {
		rec := RoundRecord{Round: r, Method: method, Seconds: 1.5 * float64(r)}
		for id := 1; id >= 0; id-- { // unsorted on purpose
			l, b, n := 50+float64(10*r+id), 40+float64(r), 30+float64(id)
			rec.Clients = append(rec.Clients, ClientMetrics{ID: id, Metrics: eval.BaseToNovel(l, b, n)})
		}
		out = append(out, rec)
	}
	return out
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func TestMetricsLogRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	l, err := NewMetricsLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	recs := roundRecords("pfedmma", 3)
	for _, r := range recs {
		if err := l.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(recs[0]); err == nil {
		t.Error("Append after Close succeeded")
	}

	got, err := ReadMetricsJSONL(filepath.Join(dir, MetricsJSONL))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(recs) {
		t.Fatalf("read %d records, want %d", len(got), len(recs))
	}
	for i, r := range got {
		want := recs[i]
		if r.Round != want.Round || r.Method != want.Method || r.Seconds != want.Seconds {
			t.Errorf("record %d header = %d/%q/%v, want %d/%q/%v", i, r.Round, r.Method, r.Seconds, want.Round, want.Method, want.Seconds)
		}
		mean := eval.MeanOf(want.Clients[0].Metrics, want.Clients[1].Metrics)
		for _, k := range BaseToNovelMetrics {
			if math.Abs(r.Mean[k]-mean[k]) > 1e-12 {
				t.Errorf("record %d mean %s = %v, want %v", i, k, r.Mean[k], mean[k])
			}
		}
		if len(r.Clients) != 2 || r.Clients[0].Metrics["local"] != want.Clients[0].Metrics["local"] {
			t.Errorf("record %d clients = %v, want %v", i, r.Clients, want.Clients)
		}
	}
	if rs := l.Records(); len(rs) != 3 || rs[2].Mean["hm"] != got[2].Mean["hm"] {
		t.Errorf("Records() = %v", rs)
	}

	rows := readCSV(t, filepath.Join(dir, MetricsCSV))
	wantCols := []string{"round", "method", "seconds",
		"mean_local", "mean_base", "mean_novel", "mean_hm",
		"client0_local", "client0_base", "client0_novel", "client0_hm",
		"client1_local", "client1_base", "client1_novel", "client1_hm"}
	if !slices.Equal(rows[0], wantCols) {
		t.Errorf("CSV header = %v\nwant %v", rows[0], wantCols)
	}
	if len(rows) != 1+len(recs) {
		t.Fatalf("CSV has %d rows, want %d", len(rows), 1+len(recs))
	}
	for i, row := range rows[1:] {
		cell := func(col string) float64 {
			v, err := strconv.ParseFloat(row[slices.Index(wantCols, col)], 64)
			if err != nil {
				t.Fatalf("row %d %s: %v", i, col, err)
			}
			return v
		}
		if cell("round") != float64(recs[i].Round) || row[1] != "pfedmma" || cell("seconds") != recs[i].Seconds {
			t.Errorf("row %d = %v", i, row)
		}
		if cell("mean_hm") != got[i].Mean["hm"] {
			t.Errorf("row %d mean_hm = %v, want %v", i, cell("mean_hm"), got[i].Mean["hm"])
		}
		if cell("client1_local") != recs[i].Clients[0].Metrics["local"] {
			t.Errorf("row %d client1_local = %v, want %v", i, cell("client1_local"), recs[i].Clients[0].Metrics["local"])
		}
	}

	// JSONL keys follow the same order as the CSV columns.
	raw, err := os.ReadFile(filepath.Join(dir, MetricsJSONL))
	if err != nil {
		t.Fatal(err)
	}
	first := strings.SplitN(string(raw), "\n", 2)[0]
	if !strings.HasPrefix(first, `{"round":1,"method":"pfedmma","seconds":1.5,"mean":{"local":`) ||
		!(strings.Index(first, `"base"`) < strings.Index(first, `"novel"`) && strings.Index(first, `"novel"`) < strings.Index(first, `"hm"`)) {
		t.Errorf("JSONL line not in stable order: %s", first)
	}
}

func TestMetricsLogColumnsGrow(t *testing.T) {
	dir := t.TempDir()
	l, err := NewMetricsLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	steps := []RoundRecord{
		{Round: 0, Method: "clip", Mean: Metrics{"acc": 61}},
		{Round: 1, Method: "promptfl", Mean: Metrics{"acc": 70, "loss": 1.25}},
		{Round: 2, Method: "promptfl", Mean: Metrics{"acc": math.NaN()}},
	}
	for _, r := range steps {
		if err := l.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	rows := readCSV(t, filepath.Join(dir, MetricsCSV))
	want := [][]string{
		{"round", "method", "seconds", "mean_acc", "mean_loss"},
		{"0", "clip", "", "61", ""},
		{"1", "promptfl", "", "70", "1.25"},
		{"2", "promptfl", "", "NaN", ""},
	}
	if len(rows) != len(want) {
		t.Fatalf("CSV = %v, want %v", rows, want)
	}
	for i := range want {
		if !slices.Equal(rows[i], want[i]) {
			t.Errorf("CSV row %d = %v, want %v", i, rows[i], want[i])
		}
	}
	got, err := ReadMetricsJSONL(filepath.Join(dir, MetricsJSONL))
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(got[2].Mean["acc"]) {
		t.Errorf("NaN did not survive the JSONL round trip: %v", got[2].Mean)
	}
}

func TestMetricsLogRejects(t *testing.T) {
	tests := []struct {
		name string
		rec  RoundRecord
		want string
	}{
		{"negative round", RoundRecord{Round: -1}, "negative round"},
		{"duplicate client", RoundRecord{Round: 2, Clients: []ClientMetrics{{ID: 3}, {ID: 3}}}, "client 3 listed twice"},
		{"empty metric", RoundRecord{Round: 2, Mean: Metrics{"": 1}}, "empty metric name"},
	}
	l, err := NewMetricsLog(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := l.Append(tc.rec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Append error = %v, want %q", err, tc.want)
			}
		})
	}
	if n := len(l.Records()); n != 0 {
		t.Errorf("rejected records were kept: %d", n)
	}
}

func TestReadMetricsJSONL(t *testing.T) {
	good := `{"round":1,"mean":{"acc":50}}` + "\n" + `{"round":2,"mean":{"acc":60}}` + "\n"
	tests := []struct {
		name    string
		content string
		rounds  int
		wantErr string
	}{
		{"clean", good, 2, ""},
		{"truncated last line", good + `{"round":3,"me`, 2, ""},
		{"bad middle line", `{"round":1,"me` + "\n" + good, 0, "line 1"},
		{"wrong type", `{"round":"one"}` + "\n", 0, "line 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), MetricsJSONL)
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			recs, err := ReadMetricsJSONL(path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), path) {
					t.Errorf("error = %v, want one naming %s and %q", err, path, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != tc.rounds || recs[len(recs)-1].Mean["acc"] != 60 {
				t.Errorf("got %v", recs)
			}
		})
	}
}
