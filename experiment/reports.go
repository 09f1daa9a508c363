package experiment

import (
	"fmt"
	"path/filepath"

	"github.com/pfedmma/pfedmma/report"
)

// writeReports writes summary.json, report.md and the PNG plots.
func writeReports(o Options, res *Result) error {
	if err := report.WriteSummary(filepath.Join(o.OutDir, "summary.json"), res.Summary); err != nil {
		return err
	}
	doc := report.Document{
		Title:  "pfedmma run",
		Text:   fmt.Sprintf("Dataset `%s`, protocol `%s`, methods %v, %d rounds, seed %d.", o.Dataset, res.Summary.Protocol, o.Methods, o.Rounds, o.Seed),
		Tables: []report.Table{res.Table},
	}
	if o.Plots {
		imgs, err := report.RunFigures(o.OutDir, res.Table.Title, res.Records, res.Summary)
		if err != nil {
			return err
		}
		doc.Images = imgs
	}
	return report.WriteMarkdown(filepath.Join(o.OutDir, "report.md"), doc)
}
