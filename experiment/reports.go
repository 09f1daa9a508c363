package experiment

import (
	"fmt"
	"path/filepath"
	"sort"

	"github.com/pfedmma/pfedmma/protocol"
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
		if res.Summary.Protocol == protocol.Domains {
			metrics = []string{"acc"}
		}
		curves := report.LearningCurves(flatBaselines(res.Records), metrics...)
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

// flatBaselines repeats the single record of a method evaluated once (zero-shot
// CLIP) at every round another method reports, so that it is drawn as a
// reference line across the learning curves.
func flatBaselines(records []report.RoundRecord) []report.RoundRecord {
	count := map[string]int{}
	rounds := map[int]bool{}
	for _, r := range records {
		count[r.Method]++
		rounds[r.Round] = true
	}
	var out []report.RoundRecord
	for _, r := range records {
		if count[r.Method] != 1 || len(rounds) <= 1 {
			out = append(out, r)
			continue
		}
		for round := range rounds {
			c := r
			c.Round = round
			out = append(out, c)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Round < out[j].Round })
	return out
}
