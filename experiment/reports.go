package experiment

import (
	"fmt"
	"path/filepath"
	"strings"

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
	if note := absenceNote(res.Records); note != "" {
		doc.Text += "\n\n" + note
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

// absenceNote says, for every round where selected clients did not answer
// (a federation over the network with sites down), which ones, and that
// the round's numbers average only those that did: "" when every round
// heard every client it asked.
func absenceNote(records []report.RoundRecord) string {
	var lines []string
	for _, r := range records {
		if len(r.Absent) == 0 {
			continue
		}
		ids := make([]string, len(r.Absent))
		for i, id := range r.Absent {
			ids[i] = fmt.Sprint(id)
		}
		line := fmt.Sprintf("- %s round %d: client(s) %s did not answer", r.Method, r.Round, strings.Join(ids, ", "))
		if len(r.Clients) > 0 {
			line += fmt.Sprintf("; the round's evaluation averages the %d that did", len(r.Clients))
		}
		lines = append(lines, line+".")
	}
	if len(lines) == 0 {
		return ""
	}
	return "**Absent sites.**\n\n" + strings.Join(lines, "\n")
}
