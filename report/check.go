package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/pfedmma/pfedmma/internal/inputfile"
)

// MaxRound bounds the round numbers a metrics file may hold (far above
// the largest federation.rounds a configuration accepts).
const MaxRound = 1_000_000

// CheckMetric reports a value no run writes for metric name: ±Inf, a
// negative loss (names holding "loss"), a negative privacy budget (names
// starting "dp_": differential privacy's ε, unbounded above), or an
// accuracy (every other metric, in percent) outside [0, 100]. NaN is accepted: runs write it for a
// metric that is undefined (a space without test images), and figures
// leave it out.
func CheckMetric(name string, v float64) error {
	switch {
	case strings.TrimSpace(name) == "":
		return errors.New("a metric with an empty name")
	case math.IsNaN(v):
		return nil
	case math.IsInf(v, 0):
		return fmt.Errorf("metric %q is %v", name, v)
	case strings.Contains(name, "loss"):
		if v < 0 {
			return fmt.Errorf("metric %q is %v; a loss is never negative", name, v)
		}
	case strings.HasPrefix(name, "dp_"):
		if v < 0 {
			return fmt.Errorf("metric %q is %v; a privacy budget is never negative", name, v)
		}
	case v < 0 || v > 100:
		return fmt.Errorf("metric %q is %v; accuracies are percentages in [0, 100]", name, v)
	}
	return nil
}

// checkMetrics applies CheckMetric to every metric of m, in sorted order.
func checkMetrics(m Metrics) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := CheckMetric(k, m[k]); err != nil {
			return err
		}
	}
	return nil
}

// check validates a record read back from a file: its round, its seconds,
// its clients and every metric's range.
func (r *RoundRecord) check() error {
	if r.Round > MaxRound {
		return fmt.Errorf("round %d: above %d", r.Round, MaxRound)
	}
	if err := r.validate(); err != nil {
		return err
	}
	if math.IsNaN(r.Seconds) || math.IsInf(r.Seconds, 0) || r.Seconds < 0 {
		return fmt.Errorf("round %d: seconds %v; want a finite duration ≥ 0", r.Round, r.Seconds)
	}
	if err := checkMetrics(r.Mean); err != nil {
		return fmt.Errorf("round %d: mean: %w", r.Round, err)
	}
	for _, c := range r.Clients {
		if c.ID < 0 {
			return fmt.Errorf("round %d: client %d: negative client ID", r.Round, c.ID)
		}
		if err := checkMetrics(c.Metrics); err != nil {
			return fmt.Errorf("round %d: client %d: %w", r.Round, c.ID, err)
		}
	}
	return nil
}

// ReadMetricsChecked reads metrics.jsonl for drawing and refuses what
// cannot be right instead of drawing it: any line that is not a record —
// a truncated last line too (ReadMetricsJSONL, which resuming uses, skips
// it) —, unknown fields, rounds that are negative, too large, repeated or
// out of order for a method, and metrics out of range ([CheckMetric]).
// Errors name the file and the line.
func ReadMetricsChecked(path string) ([]RoundRecord, error) {
	f, err := inputfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("metrics %s: %w", path, err)
	}
	defer f.Close()
	var out []RoundRecord
	last := map[string]int{}
	br := bufio.NewReader(f)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("metrics %s: %w", path, err)
		}
		eof := err == io.EOF
		text := bytes.TrimSpace(line)
		if len(text) > 0 {
			var r RoundRecord
			dec := json.NewDecoder(bytes.NewReader(text))
			dec.DisallowUnknownFields()
			if derr := dec.Decode(&r); derr != nil {
				var se *json.SyntaxError
				if eof && (errors.As(derr, &se) || errors.Is(derr, io.ErrUnexpectedEOF)) {
					return nil, fmt.Errorf("metrics %s: line %d (the last) is truncated — was the run killed while writing it? resume the run to rewrite it, or delete the line", path, n)
				}
				return nil, fmt.Errorf("metrics %s: line %d: %s", path, n, strings.TrimPrefix(derr.Error(), "json: "))
			}
			if _, terr := dec.Token(); terr != io.EOF {
				return nil, fmt.Errorf("metrics %s: line %d: data after the record", path, n)
			}
			if cerr := r.check(); cerr != nil {
				return nil, fmt.Errorf("metrics %s: line %d: %w", path, n, cerr)
			}
			if prev, seen := last[r.Method]; seen && r.Round <= prev {
				return nil, fmt.Errorf("metrics %s: line %d: method %q round %d after round %d: rounds must increase", path, n, r.Method, r.Round, prev)
			}
			last[r.Method] = r.Round
			out = append(out, r)
		}
		if eof {
			break
		}
	}
	return out, nil
}

// Check validates a summary read back from a file: method names, every
// metric's range ([CheckMetric]) and every standard deviation (finite,
// ≥ 0).
func (s *Summary) Check() error {
	seen := map[string]bool{}
	for _, m := range s.Methods {
		if strings.TrimSpace(m.Method) == "" || seen[m.Method] {
			return fmt.Errorf("methods: %q is empty or listed twice", m.Method)
		}
		seen[m.Method] = true
		if err := checkMetrics(m.Metrics); err != nil {
			return fmt.Errorf("methods: %s: %w", m.Method, err)
		}
		for k, v := range m.Std {
			if math.IsInf(v, 0) || v < 0 {
				return fmt.Errorf("std: %s: metric %q has standard deviation %v", m.Method, k, v)
			}
		}
	}
	return nil
}
