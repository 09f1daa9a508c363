package report

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Span is a run of consecutive rounds, First to Last (inclusive).
type Span struct {
	First int `json:"first"`
	Last  int `json:"last"`
}

// MarshalJSON writes the span as [first, last].
func (s Span) MarshalJSON() ([]byte, error) { return fmt.Appendf(nil, "[%d,%d]", s.First, s.Last), nil }

// Spans merges rounds (in any order, repeats ignored) into runs of
// consecutive rounds, ascending.
func Spans(rounds []int) []Span {
	rs := slices.Clone(rounds)
	slices.Sort(rs)
	rs = slices.Compact(rs)
	var out []Span
	for _, r := range rs {
		if n := len(out); n > 0 && out[n-1].Last+1 == r {
			out[n-1].Last = r
			continue
		}
		out = append(out, Span{r, r})
	}
	return out
}

// FormatSpans writes spans compactly: "round 7", "rounds 118–199",
// "rounds 3–4, 7, 9–12" ("" for none).
func FormatSpans(spans []Span) string {
	if len(spans) == 0 {
		return ""
	}
	parts := make([]string, len(spans))
	n := 0
	for i, s := range spans {
		n += s.Last - s.First + 1
		parts[i] = fmt.Sprint(s.First)
		if s.Last > s.First {
			parts[i] += fmt.Sprintf("–%d", s.Last)
		}
	}
	if n == 1 {
		return "round " + parts[0]
	}
	return "rounds " + strings.Join(parts, ", ")
}

// Absence is the rounds one site was asked for and did not answer.
type Absence struct {
	Site string `json:"site"`
	// Rounds is Spans in words ("rounds 118–199"), Count how many rounds
	// they hold.
	Rounds string `json:"rounds"`
	Spans  []Span `json:"spans"`
	Count  int    `json:"count"`
}

// Absences lists, per site that missed any, the rounds it missed:
// absent[r] are the clients absent in round r (the federation's
// RoundReport.Absent), name(id) a client's site name. Sites come in
// client order.
func Absences(absent map[int][]int, name func(int) string) []Absence {
	missed := map[int][]int{}
	for r, ids := range absent {
		for _, id := range ids {
			missed[id] = append(missed[id], r)
		}
	}
	ids := slices.Sorted(maps.Keys(missed))
	out := make([]Absence, 0, len(ids))
	for _, id := range ids {
		sp := Spans(missed[id])
		n := 0
		for _, s := range sp {
			n += s.Last - s.First + 1
		}
		out = append(out, Absence{Site: name(id), Rounds: FormatSpans(sp), Spans: sp, Count: n})
	}
	return out
}

// Departure is a site that left the federation's schedule (a revoked
// site: RoundReport.Departed): from Round on it was neither asked nor
// counted absent.
type Departure struct {
	Site   string `json:"site"`
	Round  int    `json:"round"`
	Reason string `json:"reason"`
	// Text is the same in words: "site-c departed at round 118 (revoked)".
	Text string `json:"text"`
}

// DepartedReason is why a site leaves the schedule: its certificate was
// revoked (the only way one leaves).
const DepartedReason = "revoked"

// Departures lists, per site that left the schedule, the first round it
// was out of it: departed[r] are the clients departed in round r (the
// federation's RoundReport.Departed), name(id) a client's site name. Sites
// come in client order.
func Departures(departed map[int][]int, name func(int) string) []Departure {
	first := map[int]int{}
	for r, ids := range departed {
		for _, id := range ids {
			if f, ok := first[id]; !ok || r < f {
				first[id] = r
			}
		}
	}
	ids := slices.Sorted(maps.Keys(first))
	out := make([]Departure, 0, len(ids))
	for _, id := range ids {
		out = append(out, Departure{Site: name(id), Round: first[id], Reason: DepartedReason,
			Text: fmt.Sprintf("%s departed at round %d (%s)", name(id), first[id], DepartedReason)})
	}
	return out
}

// MeanOver says over whom a mean was taken: the sites of Round's
// evaluation, out of the federation's Of sites; the others were absent
// (asked, did not answer) or had departed (left the schedule).
type MeanOver struct {
	Round    int      `json:"round"`
	Sites    []string `json:"sites"`
	Of       int      `json:"of"`
	Absent   []string `json:"absent,omitempty"`
	Departed []string `json:"departed,omitempty"`
	// Text is the same in words: "mean over 2 of 3 sites: site-a, site-b"
	// with, when some departed, "(site-c departed)".
	Text string `json:"text"`
}

// NewMeanOver is the MeanOver of round whose evaluated clients are
// present, out of clients 0..of-1, named by name; departed are the
// clients that had left the schedule by then (the others missing are
// absent).
func NewMeanOver(round int, present []int, of int, name func(int) string, departed ...int) MeanOver {
	in := map[int]bool{}
	for _, id := range present {
		in[id] = true
	}
	m := MeanOver{Round: round, Of: of, Sites: []string{}}
	for id := range of {
		switch {
		case in[id]:
			m.Sites = append(m.Sites, name(id))
		case slices.Contains(departed, id):
			m.Departed = append(m.Departed, name(id))
		default:
			m.Absent = append(m.Absent, name(id))
		}
	}
	m.Text = fmt.Sprintf("mean over %d of %d sites: %s", len(m.Sites), of, strings.Join(m.Sites, ", "))
	if len(m.Sites) == of {
		m.Text = fmt.Sprintf("mean over all %d sites", of)
	}
	if len(m.Departed) > 0 {
		m.Text += fmt.Sprintf(" (%s departed)", strings.Join(m.Departed, ", "))
	}
	return m
}
