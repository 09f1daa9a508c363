package docsgen

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/report"
)

// DefaultJobDir holds the default world job's summary.json in fp32 and in
// bf16 (docs/defaultjob/{fp32,bf16}/summary.json, from `pfedmma run` and
// `pfedmma run --set engine.precision=bf16`).
const DefaultJobDir = "defaultjob"

// summary is the part of a run's summary.json the README shows.
type summary struct {
	Metrics []string                      `json:"metrics"`
	Methods map[string]map[string]float64 `json:"methods"`
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func readSummary(path string) (summary, error) {
	var s summary
	if err := readJSON(path, &s); err != nil {
		return s, err
	}
	if len(s.Metrics) == 0 || len(s.Methods) == 0 {
		return s, fmt.Errorf("%s: keys metrics and methods must be non-empty", path)
	}
	for m, vals := range s.Methods {
		for _, k := range s.Metrics {
			if _, ok := vals[k]; !ok {
				return s, fmt.Errorf("%s: methods.%s lacks %s", path, m, k)
			}
		}
	}
	return s, nil
}

// methodOrder puts zeroshot first and the rest in name order.
func methodOrder(s summary) []string {
	var names []string
	for m := range s.Methods {
		if m != "zeroshot" {
			names = append(names, m)
		}
	}
	sort.Strings(names)
	if _, ok := s.Methods["zeroshot"]; ok {
		names = append([]string{"zeroshot"}, names...)
	}
	return names
}

// defaultJobBlocks renders the fp32 → bf16 comparison of the default job and
// the largest difference between the two.
func defaultJobBlocks(docsDir string) ([]Block, error) {
	dir := filepath.Join(docsDir, DefaultJobDir)
	fp, err := readSummary(filepath.Join(dir, "fp32", "summary.json"))
	if err != nil {
		return nil, fmt.Errorf("default job: %w", err)
	}
	bf, err := readSummary(filepath.Join(dir, "bf16", "summary.json"))
	if err != nil {
		return nil, fmt.Errorf("default job: %w", err)
	}
	if strings.Join(fp.Metrics, ",") != strings.Join(bf.Metrics, ",") {
		return nil, fmt.Errorf("default job: %s: metrics %v differ from fp32's %v", filepath.Join(dir, "bf16", "summary.json"), bf.Metrics, fp.Metrics)
	}
	var b strings.Builder
	b.WriteString("\n```\n")
	fmt.Fprintf(&b, "%-8s  %-*s  %s\n", "", 6*len(fp.Metrics)+3, "fp32", "bf16")
	worst, worstAt := 0.0, ""
	for _, m := range methodOrder(fp) {
		bv, ok := bf.Methods[m]
		if !ok {
			return nil, fmt.Errorf("default job: %s lacks method %s", filepath.Join(dir, "bf16", "summary.json"), m)
		}
		var l, r []string
		for _, k := range fp.Metrics {
			x, y := fp.Methods[m][k], bv[k]
			l = append(l, fmt.Sprintf("%5.2f", x))
			r = append(r, fmt.Sprintf("%5.2f", y))
			if d := math.Abs(x - y); d > worst {
				worst, worstAt = d, m+" "+k
			}
		}
		fmt.Fprintf(&b, "%-8s  %s      %s\n", m, strings.Join(l, " "), strings.Join(r, " "))
	}
	b.WriteString("```\n")
	src := "docs/defaultjob/fp32/summary.json and docs/defaultjob/bf16/summary.json"
	diff := "bf16 gives the same numbers as fp32 to two decimals on every metric."
	if worst > 0 {
		diff = fmt.Sprintf("The largest difference is %.2f points (%s).", worst, worstAt)
	}
	out, err := defaultJobOutput(docsDir)
	if err != nil {
		return nil, err
	}
	return []Block{
		out,
		{Name: "default-job-bf16", Source: src, Body: b.String()},
		{Name: "default-job-bf16-diff", Source: src, Body: diff},
	}, nil
}

// defaultJobOutput renders what `make run` prints at its end (the table of
// report.Summary.Table) from the fp32 run's summary.json and config.yaml.
func defaultJobOutput(docsDir string) (Block, error) {
	dir := filepath.Join(docsDir, DefaultJobDir, "fp32")
	s, err := report.ReadSummary(filepath.Join(dir, "summary.json"))
	if err != nil {
		return Block{}, fmt.Errorf("default job: %w", err)
	}
	e, err := config.Load(filepath.Join(dir, "config.yaml"))
	if err != nil {
		return Block{}, fmt.Errorf("default job: %w", err)
	}
	title := fmt.Sprintf("%s — %s, %d clients", e.Dataset.Name, s.Protocol, e.Federation.Clients)
	return Block{Name: "default-job-output", Source: "docs/defaultjob/fp32/summary.json and config.yaml",
		Body: "\n```\n" + s.Table(title).Text() + "```\n"}, nil
}
