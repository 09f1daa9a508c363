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
		metrics := res.Summary.Metrics
		if res.Summary.Protocol == Domains {
			metrics = []string{"acc"}
		}
		curves := report.LearningCurves(res.Records, metrics...)
		curves.Title = "Mean client accuracy per round"
		if err := curves.WritePNG(filepath.Join(o.OutDir, "curves.png"), 900, 540); err != nil {
			return err
		}
		bars := res.Summary.BarChart("Final accuracy")
		if err := bars.WritePNG(filepath.Join(o.OutDir, "final.png"), 900, 540); err != nil {
			return err
		}
		doc.Images = []report.Image{{Caption: "Learning curves", Path: "curves.png"}, {Caption: "Final accuracy", Path: "final.png"}}
	}
	return report.WriteMarkdown(filepath.Join(o.OutDir, "report.md"), doc)
}
