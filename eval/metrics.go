package eval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// BaseToNovelMetrics are the metric keys of the base-to-novel protocol, in
// the column order of the paper's Table 1.
var BaseToNovelMetrics = []string{"local", "base", "novel", "hm"}

// Metrics maps metric names (e.g. "local", "hm", "loss") to values.
// It marshals to a JSON object with keys in MetricOrder and writes NaN and
// ±Inf as the strings "NaN", "+Inf" and "-Inf", which plain JSON numbers
// cannot hold.
type Metrics map[string]float64

// headMetrics come first and tailMetrics last in MetricOrder; all other keys
// are sorted between them.
var (
	headMetrics = []string{"local", "base", "novel", "hm", "acc", "accuracy"}
	tailMetrics = []string{"avg", "average", "mean", "loss"}
)

// MetricOrder returns keys in a stable display order: the base-to-novel
// metrics (local, base, novel, hm) and accuracy first, other keys (such as
// per-domain accuracies) sorted, then avg/average/mean and loss. Duplicates
// are removed.
func MetricOrder(keys []string) []string {
	rank := func(k string) int {
		if i := slices.Index(headMetrics, k); i >= 0 {
			return i - len(headMetrics)
		}
		if i := slices.Index(tailMetrics, k); i >= 0 {
			return i + 1
		}
		return 0
	}
	out := slices.Clone(keys)
	slices.SortStableFunc(out, func(a, b string) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	return slices.Compact(out)
}

// Keys returns the metric names of m in MetricOrder.
func (m Metrics) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return MetricOrder(keys)
}

// HM returns the harmonic mean of vals, e.g. HM(local, base, novel) =
// 3/(1/local + 1/base + 1/novel). It is 0 if any value is ≤ 0, NaN if any
// is NaN or vals is empty.
func HM(vals ...float64) float64 {
	if len(vals) == 0 {
		return math.NaN()
	}
	var inv float64
	zero := false
	for _, v := range vals {
		if math.IsNaN(v) {
			return math.NaN()
		}
		if v <= 0 {
			zero = true
			continue
		}
		inv += 1 / v
	}
	if zero {
		return 0
	}
	return float64(len(vals)) / inv
}

// BaseToNovel returns the base-to-novel metrics with hm = HM(local, base, novel).
func BaseToNovel(local, base, novel float64) Metrics {
	return Metrics{"local": local, "base": base, "novel": novel, "hm": HM(local, base, novel)}
}

// MeanOf returns the unweighted mean of each metric over the given metric
// sets; a metric missing from some sets is averaged over those that have it.
func MeanOf(sets ...Metrics) Metrics {
	sum := Metrics{}
	n := map[string]int{}
	for _, s := range sets {
		for k, v := range s {
			sum[k] += v
			n[k]++
		}
	}
	for k := range sum {
		sum[k] /= float64(n[k])
	}
	return sum
}

// FormatFloat writes v in the shortest form that round-trips (NaN, +Inf
// and -Inf as words).
func FormatFloat(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// parseFloat reads what formatFloat writes (and "Inf").
func parseFloat(s string) (float64, error) {
	return strconv.ParseFloat(s, 64)
}

// MarshalJSON writes m as an object with keys in MetricOrder.
func (m Metrics) MarshalJSON() ([]byte, error) {
	if m == nil {
		return []byte("null"), nil
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, k := range m.Keys() {
		if i > 0 {
			buf.WriteByte(',')
		}
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		buf.Write(kb)
		buf.WriteByte(':')
		v := m[k]
		if math.IsNaN(v) || math.IsInf(v, 0) {
			buf.WriteString(strconv.Quote(FormatFloat(v)))
		} else {
			buf.WriteString(FormatFloat(v))
		}
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// UnmarshalJSON reads an object of numbers or the strings "NaN", "+Inf",
// "-Inf"; null reads as NaN.
func (m *Metrics) UnmarshalJSON(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if raw == nil {
		*m = nil
		return nil
	}
	out := make(Metrics, len(raw))
	for k, r := range raw {
		var v float64
		if string(bytes.TrimSpace(r)) == "null" {
			out[k] = math.NaN()
			continue
		}
		if err := json.Unmarshal(r, &v); err != nil {
			var s string
			if json.Unmarshal(r, &s) != nil {
				return fmt.Errorf("metric %q: %w", k, err)
			}
			if v, err = parseFloat(s); err != nil {
				return fmt.Errorf("metric %q: %w", k, err)
			}
		}
		out[k] = v
	}
	*m = out
	return nil
}
