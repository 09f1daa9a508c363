// Package redraw re-draws finished run folders (`pfedmma report`): their
// figures and report.md from the metrics they logged, and the comparison
// of several runs.
package redraw

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/report"
	"github.com/pfedmma/pfedmma/runfiles"
)

// Redraw re-draws finished run folders (`pfedmma report`): each run's
// figures (curves, final bars) and report.md from its metrics.jsonl and
// summary.json, its table printed to w; with several runs (one per dataset,
// same methods) their comparison in out: the table averaged over the
// datasets, the headline metric per dataset, and for three datasets or
// more a radar chart. Runs over every held-out domain (lodo.json) are
// re-drawn from their matrices, and several of them give FedOT's Table 1.
func Redraw(dirs []string, out string, w io.Writer) error {
	if len(dirs) == 0 {
		return fmt.Errorf("no run folder given")
	}
	if _, err := os.Stat(filepath.Join(dirs[0], report.LODOFile)); err == nil {
		return redrawLODO(dirs, out, w)
	}
	var names []string
	var sums []*report.Summary
	for _, dir := range dirs {
		name, s, err := redrawRun(dir, w)
		if err != nil {
			return err
		}
		names, sums = append(names, name), append(sums, s)
	}
	if len(dirs) == 1 {
		return nil
	}
	if out == "" {
		return fmt.Errorf("several runs need --out for their comparison")
	}
	for i, s := range sums {
		if s.Protocol != sums[0].Protocol {
			return fmt.Errorf("%s is a %s run, %s a %s run: compare runs of one protocol", dirs[i], s.Protocol, dirs[0], sums[0].Protocol)
		}
	}
	seen := map[string]bool{}
	for i, n := range names {
		if seen[n] {
			names[i] = n + " (" + filepath.Base(dirs[i]) + ")"
		}
		seen[n] = true
	}
	return compareRuns(names, sums, out, w)
}

// redrawRun re-draws one run folder's figures and report.md, prints its
// table and returns its name (its dataset) and summary.
func redrawRun(dir string, w io.Writer) (string, *report.Summary, error) {
	s, recs, err := readRunResults(dir)
	if err != nil {
		return "", nil, err
	}
	name := filepath.Base(dir)
	if info, err := runfiles.ReadInfo(dir); err == nil {
		name = info.Dataset
	}
	title := name + " — " + s.Protocol
	imgs, err := report.RunFigures(dir, title, recs, s)
	if err != nil {
		return "", nil, fmt.Errorf("figures of %s: %w", dir, err)
	}
	t := s.Table(title)
	if err := report.WriteMarkdown(filepath.Join(dir, "report.md"), report.Document{Title: "pfedmma run", Tables: []report.Table{t}, Images: imgs}); err != nil {
		return "", nil, fmt.Errorf("%s: %w", filepath.Join(dir, "report.md"), err)
	}
	fmt.Fprintln(w, t.Text())
	return name, s, nil
}

// compareRuns writes into out the comparison of several runs (datasets) of
// one protocol: the table averaged over them, the headline metric per
// dataset, each run's table and, for three or more, the radar chart.
func compareRuns(names []string, sums []*report.Summary, out string, w io.Writer) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	avg, err := report.Average(sums[0].Protocol, sums...)
	if err != nil {
		return err
	}
	avg.Methods = dropStd(avg.Methods) // spread over datasets is not a seed spread
	title := fmt.Sprintf("Average on %d datasets", len(sums))
	doc := report.Document{Title: "pfedmma comparison", Tables: []report.Table{avg.Table(title)}}
	if cols := avg.Columns(); len(cols) > 0 {
		// one headline metric per dataset (pFedMoAP's Table 1 layout)
		metric := cols[len(cols)-1]
		byName := map[string]*report.Summary{}
		for i, s := range sums {
			byName[names[i]] = s
		}
		doc.Tables = append(doc.Tables, report.DatasetTable(fmt.Sprintf("%s per dataset", metric), metric, names, byName))
	}
	for i, s := range sums {
		doc.Tables = append(doc.Tables, s.Table(names[i]))
	}
	if len(sums) >= 3 {
		metric := "acc"
		if cols := avg.Columns(); len(cols) > 0 {
			metric = cols[len(cols)-1] // hm, avg or acc: the headline column
		}
		if err := report.WriteRadar(filepath.Join(out, "radar"), title, metric, names, sums, 900, 640); err != nil {
			return err
		}
		doc.Images = append(doc.Images, report.Image{Caption: "Across datasets", Path: "radar.png"})
	}
	if err := report.WriteSummary(filepath.Join(out, "summary.json"), avg); err != nil {
		return err
	}
	if err := report.WriteMarkdown(filepath.Join(out, "report.md"), doc); err != nil {
		return err
	}
	fmt.Fprintln(w, avg.Table(title).Text())
	return nil
}

// redrawLODO re-draws runs over every held-out domain from their lodo.json:
// each run's matrices and tables, and with several runs (datasets) FedOT's
// Table 1 over them in --out.
func redrawLODO(dirs []string, out string, w io.Writer) error {
	var names []string
	byDataset := map[string][]report.LODOMatrix{}
	for _, dir := range dirs {
		r, err := report.ReadLODO(filepath.Join(dir, report.LODOFile))
		if err != nil {
			return fmt.Errorf("%s is not a leave-one-domain-out run (compare runs of one protocol): %w", dir, err)
		}
		doc := r.Document("")
		if err := report.WriteMarkdown(filepath.Join(dir, "report.md"), doc); err != nil {
			return err
		}
		for _, t := range doc.Tables {
			fmt.Fprintln(w, t.Text())
		}
		name := r.Dataset
		if _, dup := byDataset[name]; dup || name == "" {
			name += " (" + filepath.Base(dir) + ")"
		}
		names = append(names, name)
		byDataset[name] = r.Matrices
	}
	if len(dirs) == 1 {
		return nil
	}
	if out == "" {
		return fmt.Errorf("several runs need --out for their comparison")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	t := report.GPCTableMulti(fmt.Sprintf("G/P/C on %d datasets", len(names)), names, byDataset)
	if err := report.WriteMarkdown(filepath.Join(out, "report.md"), report.Document{Title: "pfedmma comparison", Tables: []report.Table{t}}); err != nil {
		return err
	}
	fmt.Fprintln(w, t.Text())
	return nil
}

func dropStd(rs []report.MethodResult) []report.MethodResult {
	for i := range rs {
		rs[i].Std = nil
	}
	return rs
}

// readRunResults reads and checks a run folder's summary.json and
// metrics.jsonl for drawing: both files' values in range
// (report.ReadMetricsChecked, Summary.Check), and every method of the
// summary present in the metrics (else its table row would stand without
// its curve). Errors name the file.
// knownProtocols are the protocols a run's summary may name.
var knownProtocols = []string{config.ProtocolBaseToNovel, config.ProtocolDirichlet, config.ProtocolDomains,
	config.ProtocolPathological, config.ProtocolNatural, config.ProtocolLODO, config.ProtocolDG}

func readRunResults(dir string) (*report.Summary, []report.RoundRecord, error) {
	sumPath, metPath := filepath.Join(dir, report.SummaryFile), filepath.Join(dir, report.MetricsJSONL)
	s, err := report.ReadSummary(sumPath)
	if err != nil {
		return nil, nil, err
	}
	if err := s.Check(); err != nil {
		return nil, nil, fmt.Errorf("summary %s: %w", sumPath, err)
	}
	if !slices.Contains(knownProtocols, s.Protocol) {
		return nil, nil, fmt.Errorf("summary %s: field \"protocol\": %q is not a protocol pfedmma runs (%s)", sumPath, s.Protocol, strings.Join(knownProtocols, ", "))
	}
	recs, err := report.ReadMetricsChecked(metPath)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range recs {
		if len(r.Mean) == 0 && len(r.Absent) == 0 {
			return nil, nil, fmt.Errorf("metrics %s: method %q round %d: field \"mean\" is empty (and no client is absent): a run writes a round's mean metrics, so the file is damaged", metPath, r.Method, r.Round)
		}
	}
	has := map[string]bool{}
	for _, r := range recs {
		has[r.Method] = true
	}
	for _, m := range s.Methods {
		if !has[m.Method] && !(len(s.Methods) == 1 && has[""]) {
			return nil, nil, fmt.Errorf("%s lists method %s but %s holds no round of it (lines lost or the files belong to different runs)", sumPath, m.Method, metPath)
		}
	}
	return s, recs, nil
}
