package experiment

import (
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/report"
)

// TestAbsenceNote: report.md says which clients a round did not hear and
// how many its evaluation averages; a run where every client answered gets
// no note.
func TestAbsenceNote(t *testing.T) {
	full := []report.RoundRecord{{Round: 0, Method: "pfedmma", Participants: []int{0, 1, 2}}}
	if n := absenceNote(full); n != "" {
		t.Errorf("every client answered, yet the note reads %q", n)
	}
	recs := append(full,
		report.RoundRecord{Round: 1, Method: "pfedmma", Participants: []int{0, 2}, Absent: []int{1}},
		report.RoundRecord{Round: 2, Method: "pfedmma", Participants: []int{0}, Absent: []int{1, 2},
			Clients: []report.ClientMetrics{{ID: 0}}})
	n := absenceNote(recs)
	for _, want := range []string{"round 1: client(s) 1 did not answer.", "round 2: client(s) 1, 2 did not answer; the round's evaluation averages the 1 that did."} {
		if !strings.Contains(n, want) {
			t.Errorf("note lacks %q:\n%s", want, n)
		}
	}
	if strings.Contains(n, "round 0") {
		t.Errorf("note names a round every client answered:\n%s", n)
	}
}
