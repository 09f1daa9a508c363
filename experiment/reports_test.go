package experiment

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/report"
)

// revokedAt118 is a 200-round federation of three sites where site-c
// (client 2) is absent from round 118 on; every round evaluates and each
// present site uploads 1,088 payload bytes and downloads 2,176.
func revokedAt118() []federation.RoundReport {
	var rounds []federation.RoundReport
	for r := range 200 {
		rep := federation.RoundReport{Round: r, Selected: []int{0, 1, 2}, Eval: map[int]federation.Metrics{}}
		for id := range 3 {
			if id == 2 && r >= 118 {
				rep.Absent = append(rep.Absent, id)
				rep.Failures = map[int]string{id: "revoked"}
				continue
			}
			rep.Participants = append(rep.Participants, id)
			rep.Eval[id] = federation.Metrics{"acc": 50}
			rep.BytesUp += 1088
			rep.BytesDown += 2176
		}
		rounds = append(rounds, rep)
	}
	return rounds
}

// TestAbsencesInSummaryAndReport: a site revoked at round 118 of 200 is
// named once, with its rounds as a range, in summary.json and report.md
// (not a line per round), and both say the final mean is over the two
// sites that answered.
func TestAbsencesInSummaryAndReport(t *testing.T) {
	sum := &report.Summary{Protocol: "fewshot", Methods: []report.MethodResult{{Method: "pfedmma", Metrics: report.Metrics{"acc": 50}}}}
	over, ok := addAbsences(sum, "pfedmma", revokedAt118(), 3, siteNames([]string{"site-a", "site-b", "site-c"}))
	if !ok || over.Text != "mean over 2 of 3 sites: site-a, site-b" {
		t.Fatalf("mean over: %+v", over)
	}
	path := filepath.Join(t.TempDir(), "summary.json")
	if err := report.WriteSummary(path, sum); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	var js struct {
		Absent []struct {
			Site, Rounds string
			Spans        [][2]int
			Count        int
		}
		MeanOver map[string]struct {
			Round  int
			Sites  []string
			Of     int
			Absent []string
			Text   string
		} `json:"mean_over"`
	}
	if err := json.Unmarshal(b, &js); err != nil {
		t.Fatal(err)
	}
	if len(js.Absent) != 1 || js.Absent[0].Site != "site-c" || js.Absent[0].Rounds != "rounds 118–199" || js.Absent[0].Count != 82 ||
		len(js.Absent[0].Spans) != 1 || js.Absent[0].Spans[0] != [2]int{118, 199} {
		t.Errorf("summary.json absent: %+v\n%s", js.Absent, b)
	}
	m := js.MeanOver["pfedmma"]
	if m.Round != 199 || m.Of != 3 || strings.Join(m.Sites, ",") != "site-a,site-b" || strings.Join(m.Absent, ",") != "site-c" || m.Text != over.Text {
		t.Errorf("summary.json mean_over: %+v", m)
	}
	note := absenceNote(sum)
	if strings.Count(note, "\n- ") != 1 || !strings.Contains(note, "- site-c: rounds 118–199 (82 in all)") ||
		!strings.Contains(note, "mean over 2 of 3 sites: site-a, site-b; absent: site-c") {
		t.Errorf("report.md note:\n%s", note)
	}
	if strings.Count(note, "\n") > 6 {
		t.Errorf("the note takes %d lines for one absent site:\n%s", strings.Count(note, "\n"), note)
	}
	full := &report.Summary{}
	addAbsences(full, "pfedmma", revokedAt118()[:100], 3, siteNames(nil))
	if n := absenceNote(full); n != "" {
		t.Errorf("every site answered, yet the note reads %q", n)
	}
}

// TestUpdateBytesOverPresentSites: the bytes per round per site average
// the site-rounds that happened — an absent site's rounds are not zeros.
func TestUpdateBytesOverPresentSites(t *testing.T) {
	b := newSiteBytes(3)
	for _, r := range revokedAt118() {
		b.add("pfedmma", r)
	}
	ex := b.extra()
	up := ex["update_bytes_per_round_per_site"].(map[string]float64)["pfedmma"]
	down := ex["download_bytes_per_round_per_site"].(map[string]float64)["pfedmma"]
	if up != 1088 || down != 2176 {
		t.Errorf("per site-round: %v up, %v down; want 1088 and 2176 (the absent site-rounds left out)", up, down)
	}
	if tot := ex["update_bytes_total"].(map[string]int64)["pfedmma"]; tot != 1088*(3*118+2*82) {
		t.Errorf("total up %d", tot)
	}
}

// departedAt118 is revokedAt118 as the coordinator reports a revoked
// site: site-c is cut off in round 117 (absent, failed) and from round 118
// on it has left the schedule (Departed: neither asked nor absent).
func departedAt118() []federation.RoundReport {
	rounds := revokedAt118()
	for i := range rounds {
		r := &rounds[i]
		switch {
		case r.Round == 117:
			r.Absent, r.Failures = []int{2}, map[int]string{2: "revoked"}
			r.Participants = []int{0, 1}
			delete(r.Eval, 2)
			r.BytesUp, r.BytesDown = 2*1088, 2*2176
		case r.Round >= 118:
			r.Selected, r.Absent, r.Failures, r.Departed = []int{0, 1}, nil, nil, []int{2}
		}
	}
	return rounds
}

// TestDepartedInSummaryAndReport: a site revoked at round 118 of 200 (cut
// off in round 117) is named departed once in summary.json and report.md,
// "site-c departed at round 118 (revoked)", not absent for the 82 rounds
// after; the final mean says it is over the two others with site-c
// departed; the bytes per site-round leave its departed rounds out.
func TestDepartedInSummaryAndReport(t *testing.T) {
	sum := &report.Summary{Protocol: "fewshot", Methods: []report.MethodResult{{Method: "pfedmma", Metrics: report.Metrics{"acc": 50}}}}
	over, ok := addAbsences(sum, "pfedmma", departedAt118(), 3, siteNames([]string{"site-a", "site-b", "site-c"}))
	if want := "mean over 2 of 3 sites: site-a, site-b (site-c departed)"; !ok || over.Text != want || len(over.Absent) != 0 {
		t.Fatalf("mean over: %+v, want %q and none absent", over, want)
	}
	path := filepath.Join(t.TempDir(), "summary.json")
	if err := report.WriteSummary(path, sum); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	var js struct {
		Absent   []struct{ Site, Rounds string }
		Departed []struct {
			Site, Reason, Text string
			Round              int
		}
		MeanOver map[string]struct {
			Sites, Absent, Departed []string
			Text                    string
		} `json:"mean_over"`
	}
	if err := json.Unmarshal(b, &js); err != nil {
		t.Fatal(err)
	}
	if len(js.Departed) != 1 || js.Departed[0].Site != "site-c" || js.Departed[0].Round != 118 || js.Departed[0].Reason != "revoked" ||
		js.Departed[0].Text != "site-c departed at round 118 (revoked)" {
		t.Errorf("summary.json departed: %+v\n%s", js.Departed, b)
	}
	if len(js.Absent) != 1 || js.Absent[0].Rounds != "round 117" {
		t.Errorf("summary.json absent: %+v, want site-c in round 117 alone", js.Absent)
	}
	if m := js.MeanOver["pfedmma"]; strings.Join(m.Sites, ",") != "site-a,site-b" || strings.Join(m.Departed, ",") != "site-c" || len(m.Absent) != 0 || m.Text != over.Text {
		t.Errorf("summary.json mean_over: %+v", m)
	}
	note := absenceNote(sum)
	if !strings.Contains(note, "**Departed sites**") || strings.Count(note, "\n- ") != 2 || !strings.Contains(note, "- site-c departed at round 118 (revoked)") ||
		!strings.Contains(note, "- site-c: round 117 (1 in all)") || !strings.Contains(note, "mean over 2 of 3 sites: site-a, site-b (site-c departed)") {
		t.Errorf("report.md note:\n%s", note)
	}
	bytes := newSiteBytes(3)
	for _, r := range departedAt118() {
		bytes.add("pfedmma", r)
	}
	if down := bytes.extra()["download_bytes_per_round_per_site"].(map[string]float64)["pfedmma"]; down != 2176 {
		t.Errorf("download bytes per site-round %v, want 2176 (the departed site-rounds left out)", down)
	}
}
