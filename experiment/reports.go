package experiment

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pfedmma/pfedmma/federation"
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
	if note := absenceNote(res.Summary); note != "" {
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

// The summary's fields that name a federation's absent sites
// (addAbsences).
const (
	absentKey   = "absent"
	departedKey = "departed"
	meanOverKey = "mean_over"
)

// siteNames names client i names[i], or "client i" past the list.
func siteNames(names []string) func(int) string {
	return func(id int) string {
		if id >= 0 && id < len(names) && names[id] != "" {
			return names[id]
		}
		return fmt.Sprintf("client %d", id)
	}
}

// addAbsences names in sum the sites that missed rounds of method's
// federation ("absent": each site's rounds as ranges, never a line per
// round), the sites that left its schedule ("departed": "site-c departed
// at round 118 (revoked)") and says over whom the final means were taken
// ("mean_over": the last evaluated round's sites, out of clients). It
// returns the latter.
func addAbsences(sum *report.Summary, method string, rounds []federation.RoundReport, clients int, name func(int) string) (report.MeanOver, bool) {
	absent, departed := map[int][]int{}, map[int][]int{}
	for _, r := range rounds {
		if len(r.Absent) > 0 {
			absent[r.Round] = r.Absent
		}
		if len(r.Departed) > 0 {
			departed[r.Round] = r.Departed
		}
	}
	if sum.Extra == nil {
		sum.Extra = map[string]any{}
	}
	sum.Extra[absentKey] = report.Absences(absent, name)
	if len(departed) > 0 {
		sum.Extra[departedKey] = report.Departures(departed, name)
	}
	for i := len(rounds) - 1; i >= 0; i-- {
		if r := rounds[i]; r.Eval != nil {
			m := report.NewMeanOver(r.Round, slices.Sorted(maps.Keys(r.Eval)), clients, name, r.Departed...)
			sum.Extra[meanOverKey] = map[string]report.MeanOver{method: m}
			return m, true
		}
	}
	return report.MeanOver{}, false
}

// absenceNote is report.md's paragraph on the sites that missed rounds
// (one line per site, its rounds as ranges), the sites that departed (one
// line each) and over whom each method's final means were taken when not
// over every site: "" when no site missed a round or departed.
func absenceNote(sum *report.Summary) string {
	abs, _ := sum.Extra[absentKey].([]report.Absence)
	dep, _ := sum.Extra[departedKey].([]report.Departure)
	if len(abs) == 0 && len(dep) == 0 {
		return ""
	}
	var parts []string
	if len(abs) > 0 {
		lines := make([]string, 0, len(abs))
		for _, a := range abs {
			lines = append(lines, fmt.Sprintf("- %s: %s (%d in all)", a.Site, a.Rounds, a.Count))
		}
		parts = append(parts, "**Absent sites** (asked, did not answer; a round's means are over the sites that did):\n\n"+strings.Join(lines, "\n"))
	}
	if len(dep) > 0 {
		lines := make([]string, 0, len(dep))
		for _, d := range dep {
			lines = append(lines, "- "+d.Text)
		}
		parts = append(parts, "**Departed sites** (left the schedule: from that round on neither asked nor counted absent):\n\n"+strings.Join(lines, "\n"))
	}
	over, _ := sum.Extra[meanOverKey].(map[string]report.MeanOver)
	for _, m := range slices.Sorted(maps.Keys(over)) {
		o := over[m]
		if len(o.Absent) == 0 && len(o.Departed) == 0 {
			continue
		}
		line := fmt.Sprintf("%s's final metrics (round %d) are the %s", m, o.Round, o.Text)
		if len(o.Absent) > 0 {
			line += "; absent: " + strings.Join(o.Absent, ", ")
		}
		parts = append(parts, line+".")
	}
	return strings.Join(parts, "\n\n")
}
