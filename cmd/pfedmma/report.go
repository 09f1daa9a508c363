package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/report"
)

func init() {
	var out string
	cmd := &cobra.Command{
		Use:   "report RUN_DIR [RUN_DIR...] [--out DIR]",
		Short: "Re-draw a finished run's tables and figures; with several runs (datasets), their comparison",
		Long: `Re-draw the figures (curves.png/svg: one panel per metric; final.png/svg: the
final bars) and report.md of each finished run folder from its metrics.jsonl and
summary.json. With several run folders (one per dataset, same methods) it also
writes into --out the table averaged over the datasets (summary.json, report.md)
and, for three datasets or more, a radar chart of the headline metric
(radar.png/svg: HM for base-to-novel, else accuracy), and the headline metric per
dataset and method (pFedMoAP's Table 1 layout). A leave-one-domain-out run over
every held-out domain (lodo.json) is re-drawn as its accuracy matrices, G/P/C and
generalisation tables; several of them (datasets) give FedOT's Table 1.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := os.Stat(filepath.Join(args[0], report.LODOFile)); err == nil {
				return reportLODO(cmd, args, out)
			}
			var names []string
			var sums []*report.Summary
			for _, dir := range args {
				s, recs, err := readRunResults(dir)
				if err != nil {
					return fmt.Errorf("report: %w", err)
				}
				name := filepath.Base(dir)
				if info, err := experiment.ReadRunInfo(dir); err == nil {
					name = info.Dataset
				}
				title := name + " — " + s.Protocol
				imgs, err := report.RunFigures(dir, title, recs, s)
				if err != nil {
					return fmt.Errorf("report: figures of %s: %w", dir, err)
				}
				t := s.Table(title)
				if err := report.WriteMarkdown(filepath.Join(dir, "report.md"), report.Document{Title: "pfedmma run", Tables: []report.Table{t}, Images: imgs}); err != nil {
					return fmt.Errorf("report: %s: %w", filepath.Join(dir, "report.md"), err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), t.Text())
				names, sums = append(names, name), append(sums, s)
			}
			if len(args) == 1 {
				return nil
			}
			if out == "" {
				return fmt.Errorf("report: several runs need --out for their comparison")
			}
			for i, s := range sums {
				if s.Protocol != sums[0].Protocol {
					return fmt.Errorf("report: %s is a %s run, %s a %s run: compare runs of one protocol", args[i], s.Protocol, args[0], sums[0].Protocol)
				}
			}
			seen := map[string]bool{}
			for i, n := range names {
				if seen[n] {
					names[i] = n + " (" + filepath.Base(args[i]) + ")"
				}
				seen[n] = true
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return fmt.Errorf("report: %w", err)
			}
			avg, err := report.Average(sums[0].Protocol, sums...)
			if err != nil {
				return fmt.Errorf("report: %w", err)
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
					return fmt.Errorf("report: %w", err)
				}
				doc.Images = append(doc.Images, report.Image{Caption: "Across datasets", Path: "radar.png"})
			}
			if err := report.WriteSummary(filepath.Join(out, "summary.json"), avg); err != nil {
				return fmt.Errorf("report: %w", err)
			}
			if err := report.WriteMarkdown(filepath.Join(out, "report.md"), doc); err != nil {
				return fmt.Errorf("report: %w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), avg.Table(title).Text())
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "folder for the comparison of several runs")
	rootCmd.AddCommand(cmd)
}

// reportLODO re-draws runs over every held-out domain from their lodo.json:
// each run's matrices and tables, and with several runs (datasets) FedOT's
// Table 1 over them in --out.
func reportLODO(cmd *cobra.Command, args []string, out string) error {
	var names []string
	byDataset := map[string][]report.LODOMatrix{}
	for _, dir := range args {
		r, err := report.ReadLODO(filepath.Join(dir, report.LODOFile))
		if err != nil {
			return fmt.Errorf("report: %s is not a leave-one-domain-out run (compare runs of one protocol): %w", dir, err)
		}
		doc := r.Document("")
		if err := report.WriteMarkdown(filepath.Join(dir, "report.md"), doc); err != nil {
			return fmt.Errorf("report: %w", err)
		}
		for _, t := range doc.Tables {
			fmt.Fprintln(cmd.OutOrStdout(), t.Text())
		}
		name := r.Dataset
		if _, dup := byDataset[name]; dup || name == "" {
			name += " (" + filepath.Base(dir) + ")"
		}
		names = append(names, name)
		byDataset[name] = r.Matrices
	}
	if len(args) == 1 {
		return nil
	}
	if out == "" {
		return fmt.Errorf("report: several runs need --out for their comparison")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	t := report.GPCTableMulti(fmt.Sprintf("G/P/C on %d datasets", len(names)), names, byDataset)
	if err := report.WriteMarkdown(filepath.Join(out, "report.md"), report.Document{Title: "pfedmma comparison", Tables: []report.Table{t}}); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	fmt.Fprintln(cmd.OutOrStdout(), t.Text())
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
func readRunResults(dir string) (*report.Summary, []report.RoundRecord, error) {
	sumPath, metPath := filepath.Join(dir, report.SummaryFile), filepath.Join(dir, report.MetricsJSONL)
	s, err := report.ReadSummary(sumPath)
	if err != nil {
		return nil, nil, err
	}
	if err := s.Check(); err != nil {
		return nil, nil, fmt.Errorf("summary %s: %w", sumPath, err)
	}
	recs, err := report.ReadMetricsChecked(metPath)
	if err != nil {
		return nil, nil, err
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
