package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"

	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/internal/inputfile"
)

// SummaryFile is the conventional name of the summary written by WriteSummary.
const SummaryFile = "summary.json"

// MethodResult is the final metrics of one method.
type MethodResult struct {
	Method  string
	Metrics Metrics
	// Std, when set, is each metric's standard deviation over the seeds
	// the mean Metrics was taken over (see Average).
	Std Metrics
}

// Summary is the final result of a run or experiment:
//
//	{"protocol": "base2novel", "metrics": ["local","base","novel","hm"],
//	 "methods": {"pfedmma": {"local": 97.17, "base": 77.4, "novel": 81.49, "hm": 84.15}},
//	 "config": {...}, "timings": {"train_s": 2175}, ...Extra}
//
// Accuracies are in percent. Methods keep their insertion order, in Go and
// in the JSON object.
type Summary struct {
	Protocol string
	// Metrics are the protocol's metric keys in column order; if empty,
	// Columns uses every key present, in MetricOrder.
	Metrics []string
	Methods []MethodResult
	Config  any                // optional, e.g. the run's configuration
	Timings map[string]float64 // optional, e.g. seconds per phase
	Extra   map[string]any     // optional further top-level fields
}

// reserved top-level keys of summary.json.
var reserved = []string{"protocol", "metrics", "methods", "std", "config", "timings"}

// Set adds or replaces the metrics of method, keeping the method's position.
func (s *Summary) Set(method string, m Metrics) {
	for i := range s.Methods {
		if s.Methods[i].Method == method {
			s.Methods[i].Metrics = m
			return
		}
	}
	s.Methods = append(s.Methods, MethodResult{Method: method, Metrics: m})
}

// Get returns the metrics of method.
func (s *Summary) Get(method string) (Metrics, bool) {
	for _, r := range s.Methods {
		if r.Method == method {
			return r.Metrics, true
		}
	}
	return nil, false
}

// Columns returns s.Metrics, or if it is empty the union of all methods'
// metric keys in MetricOrder.
func (s *Summary) Columns() []string {
	if len(s.Metrics) > 0 {
		return slices.Clone(s.Metrics)
	}
	var keys []string
	for _, r := range s.Methods {
		keys = append(keys, r.Metrics.Keys()...)
	}
	return eval.MetricOrder(keys)
}

// MarshalJSON writes the summary with methods as an object in insertion
// order and Extra's keys at the top level, sorted.
func (s Summary) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	field := func(name string, v any) error {
		if buf.Len() > 1 {
			buf.WriteByte(',')
		}
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("field %q: %w", name, err)
		}
		kb, _ := json.Marshal(name)
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(b)
		return nil
	}
	buf.WriteByte('{')
	if err := field("protocol", s.Protocol); err != nil {
		return nil, err
	}
	if err := field("metrics", s.Columns()); err != nil {
		return nil, err
	}
	if buf.Len() > 1 {
		buf.WriteByte(',')
	}
	if err := writeMethods(&buf, s.Methods); err != nil {
		return nil, err
	}
	std := map[string]Metrics{}
	for _, r := range s.Methods {
		if r.Std != nil {
			std[r.Method] = r.Std
		}
	}
	if len(std) > 0 {
		if err := field("std", std); err != nil {
			return nil, err
		}
	}
	if s.Config != nil {
		if err := field("config", s.Config); err != nil {
			return nil, err
		}
	}
	if s.Timings != nil {
		if err := field("timings", Metrics(s.Timings)); err != nil {
			return nil, err
		}
	}
	keys := make([]string, 0, len(s.Extra))
	for k := range s.Extra {
		if slices.Contains(reserved, k) {
			return nil, fmt.Errorf("extra field %q clashes with a summary field", k)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := field(k, s.Extra[k]); err != nil {
			return nil, err
		}
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// writeMethods writes "methods" as an object of each method's metrics, in
// the methods' order, refusing a method listed twice.
func writeMethods(buf *bytes.Buffer, methods []MethodResult) error {
	buf.WriteString(`"methods":{`)
	seen := map[string]bool{}
	for i, r := range methods {
		if seen[r.Method] {
			return fmt.Errorf("method %q listed twice", r.Method)
		}
		seen[r.Method] = true
		if i > 0 {
			buf.WriteByte(',')
		}
		kb, _ := json.Marshal(r.Method)
		mb, err := json.Marshal(r.Metrics)
		if err != nil {
			return fmt.Errorf("method %q: %w", r.Method, err)
		}
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(mb)
	}
	buf.WriteByte('}')
	return nil
}

// UnmarshalJSON reads what MarshalJSON writes; methods keep their order in
// the file, unknown top-level fields go to Extra, config is decoded as
// generic JSON values (map[string]any, ...).
func (s *Summary) UnmarshalJSON(data []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return err
	}
	*s = Summary{}
	if raw, ok := top["protocol"]; ok {
		if err := json.Unmarshal(raw, &s.Protocol); err != nil {
			return fmt.Errorf("protocol: %w", err)
		}
	}
	if raw, ok := top["metrics"]; ok {
		if err := json.Unmarshal(raw, &s.Metrics); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	if raw, ok := top["methods"]; ok {
		ms, err := decodeMethods(raw)
		if err != nil {
			return fmt.Errorf("methods: %w", err)
		}
		s.Methods = ms
	}
	if raw, ok := top["std"]; ok {
		var std map[string]Metrics
		if err := json.Unmarshal(raw, &std); err != nil {
			return fmt.Errorf("std: %w", err)
		}
		for i := range s.Methods {
			s.Methods[i].Std = std[s.Methods[i].Method]
		}
	}
	if raw, ok := top["config"]; ok {
		if err := json.Unmarshal(raw, &s.Config); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	if raw, ok := top["timings"]; ok {
		var t Metrics
		if err := json.Unmarshal(raw, &t); err != nil {
			return fmt.Errorf("timings: %w", err)
		}
		s.Timings = t
	}
	for k, raw := range top {
		if slices.Contains(reserved, k) {
			continue
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		if s.Extra == nil {
			s.Extra = map[string]any{}
		}
		s.Extra[k] = v
	}
	return nil
}

// decodeMethods reads a JSON object of method → metrics in file order.
func decodeMethods(raw json.RawMessage) ([]MethodResult, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not an object")
	}
	var out []MethodResult
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := tok.(string)
		var m Metrics
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("method %q: %w", name, err)
		}
		out = append(out, MethodResult{Method: name, Metrics: m})
	}
	return out, nil
}

// WriteSummary writes s as indented JSON to path, atomically.
func WriteSummary(path string, s *Summary) error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("summary %s: %w", path, err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return fmt.Errorf("summary %s: %w", path, err)
	}
	out.WriteByte('\n')
	return writeFileAtomic(path, func(w io.Writer) error {
		_, err := w.Write(out.Bytes())
		return err
	})
}

// ReadSummary reads a summary written by WriteSummary.
func ReadSummary(path string) (*Summary, error) {
	b, err := inputfile.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("summary %s: %w", path, err)
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("summary %s: %w", path, err)
	}
	return &s, nil
}

// Average returns the per-method mean of several summaries, e.g. the
// "Average on 7 datasets" column group of the paper's Table 1: methods
// present in every summary, in the first summary's order; each metric
// averaged over the summaries (a metric missing from any is left out).
// Every metric is averaged as is, so the averaged hm is the mean of the
// per-summary hm, as in the paper. Std holds each metric's sample standard
// deviation (n − 1) when there are two summaries or more. Config, timings
// and extras are dropped.
func Average(protocol string, summaries ...*Summary) (*Summary, error) {
	if len(summaries) == 0 {
		return nil, errors.New("average: no summaries")
	}
	out := &Summary{Protocol: protocol, Metrics: summaries[0].Metrics}
	for _, r := range summaries[0].Methods {
		sets := []Metrics{r.Metrics}
		for _, s := range summaries[1:] {
			m, ok := s.Get(r.Method)
			if !ok {
				sets = nil
				break
			}
			sets = append(sets, m)
		}
		if sets == nil {
			continue
		}
		mean, std := Metrics{}, Metrics{}
		for k := range r.Metrics {
			sum, all := 0.0, true
			for _, m := range sets {
				v, ok := m[k]
				if !ok {
					all = false
					break
				}
				sum += v
			}
			if !all {
				continue
			}
			mu := sum / float64(len(sets))
			mean[k] = mu
			if len(sets) > 1 {
				var ss float64
				for _, m := range sets {
					ss += (m[k] - mu) * (m[k] - mu)
				}
				std[k] = math.Sqrt(ss / float64(len(sets)-1))
			}
		}
		res := MethodResult{Method: r.Method, Metrics: mean}
		if len(sets) > 1 {
			res.Std = std
		}
		out.Methods = append(out.Methods, res)
	}
	if len(out.Methods) == 0 {
		return nil, errors.New("average: no method is in every summary")
	}
	return out, nil
}
