package eval

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestMetricOrder(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want []string
	}{
		{"base-to-novel", []string{"hm", "novel", "local", "base"}, []string{"local", "base", "novel", "hm"}},
		{"domains then avg", []string{"avg", "sketch", "clipart", "real"}, []string{"clipart", "real", "sketch", "avg"}},
		{"acc and loss", []string{"loss", "zeta", "acc"}, []string{"acc", "zeta", "loss"}},
		{"duplicates", []string{"hm", "hm", "b", "a", "b"}, []string{"hm", "a", "b"}},
		{"empty", nil, []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := MetricOrder(tc.in)
			if !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
				t.Errorf("MetricOrder(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestHM(t *testing.T) {
	tests := []struct {
		name string
		vals []float64
		want float64
	}{
		{"equal", []float64{80, 80, 80}, 80},
		{"two", []float64{1, 3}, 1.5}, // 2/(1+1/3)
		{"paper pFedMMA", []float64{97.17, 77.40, 81.49}, 3 / (1/97.17 + 1/77.40 + 1/81.49)},
		{"zero", []float64{0, 50, 60}, 0},
		{"nan", []float64{math.NaN(), 50}, math.NaN()},
		{"empty", nil, math.NaN()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := HM(tc.vals...)
			if math.IsNaN(tc.want) {
				if !math.IsNaN(got) {
					t.Errorf("HM(%v) = %v, want NaN", tc.vals, got)
				}
				return
			}
			if math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("HM(%v) = %v, want %v", tc.vals, got, tc.want)
			}
		})
	}
	m := BaseToNovel(90, 60, 72)
	if want := HM(90, 60, 72); m["hm"] != want {
		t.Errorf("BaseToNovel hm = %v, want %v", m["hm"], want)
	}
}

func TestMetricsJSON(t *testing.T) {
	m := Metrics{"novel": 3.25, "local": 1, "loss": math.NaN(), "base": math.Inf(1), "hm": math.Inf(-1), "x": 1e-300}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"local":1,"base":"+Inf","novel":3.25,"hm":"-Inf","x":1e-300,"loss":"NaN"}`
	if string(b) != want {
		t.Errorf("Marshal = %s, want %s", b, want)
	}
	var back Metrics
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back) != len(m) {
		t.Fatalf("round trip has %d keys, want %d", len(back), len(m))
	}
	for k, v := range m {
		if got := back[k]; got != v && !(math.IsNaN(got) && math.IsNaN(v)) {
			t.Errorf("round trip %q = %v, want %v", k, got, v)
		}
	}
	if err := json.Unmarshal([]byte(`{"a":null}`), &back); err != nil || !math.IsNaN(back["a"]) {
		t.Errorf("null: got %v, %v; want NaN, nil", back["a"], err)
	}
	for _, bad := range []string{`{"a":"high"}`, `{"a":[1]}`, `[1,2]`} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil {
			t.Errorf("Unmarshal(%s) succeeded, want error", bad)
		} else if strings.Contains(bad, `"a"`) && !strings.Contains(err.Error(), `"a"`) {
			t.Errorf("error %v does not name the metric", err)
		}
	}
}

func TestMeanOf(t *testing.T) {
	got := MeanOf(Metrics{"acc": 50, "loss": 2}, Metrics{"acc": 70}, Metrics{"acc": 90, "loss": 4})
	want := Metrics{"acc": 70, "loss": 3}
	if len(got) != len(want) || got["acc"] != want["acc"] || got["loss"] != want["loss"] {
		t.Errorf("MeanOf = %v, want %v", got, want)
	}
}

func TestHMOfThree(t *testing.T) {
	tests := []struct {
		l, b, n, want float64
	}{
		{90, 90, 90, 90},
		{97.17, 77.40, 81.49, 84.5485}, // 3/(1/97.17+1/77.40+1/81.49)
		{50, 0, 80, 0},
		{100, 50, 25, 3 / (0.01 + 0.02 + 0.04)},
	}
	for _, tc := range tests {
		if got := HM(tc.l, tc.b, tc.n); math.Abs(got-tc.want) > 0.01 {
			t.Errorf("HM(%g, %g, %g) = %.4f, want %.4f", tc.l, tc.b, tc.n, got, tc.want)
		}
	}
}
