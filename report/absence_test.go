package report

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestSpansAndFormat: rounds merge into runs of consecutive rounds, written
// compactly.
func TestSpansAndFormat(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{7}, "round 7"},
		{[]int{7, 7}, "round 7"},
		{[]int{119, 118, 120}, "rounds 118–120"},
		{[]int{3, 4, 7, 9, 10, 11, 12}, "rounds 3–4, 7, 9–12"},
		{[]int{5, 1}, "rounds 1, 5"},
	} {
		if got := FormatSpans(Spans(c.in)); got != c.want {
			t.Errorf("FormatSpans(Spans(%v)) = %q, want %q", c.in, got, c.want)
		}
	}
	b, _ := json.Marshal(Spans([]int{1, 2, 3, 9}))
	if string(b) != "[[1,3],[9,9]]" {
		t.Errorf("spans as JSON: %s", b)
	}
}

// TestAbsences: a site revoked at round 118 of 200 is one line with one
// range, not 82; a site absent twice has two ranges; sites in client order.
func TestAbsences(t *testing.T) {
	absent := map[int][]int{}
	for r := 118; r < 200; r++ {
		absent[r] = []int{2}
	}
	absent[5] = []int{0, 2}
	absent[6] = []int{0}
	absent[40] = []int{0}
	name := func(id int) string { return fmt.Sprintf("site-%c", 'a'+id) }
	got := Absences(absent, name)
	want := []Absence{
		{Site: "site-a", Rounds: "rounds 5–6, 40", Spans: []Span{{5, 6}, {40, 40}}, Count: 3},
		{Site: "site-c", Rounds: "rounds 5, 118–199", Spans: []Span{{5, 5}, {118, 199}}, Count: 83},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Absences = %+v, want %+v", got, want)
	}
	if len(Absences(nil, name)) != 0 {
		t.Error("no absence, yet some listed")
	}
}

// TestMeanOver says over whom a mean was taken.
func TestMeanOver(t *testing.T) {
	name := func(id int) string { return fmt.Sprintf("site-%c", 'a'+id) }
	m := NewMeanOver(199, []int{1, 0}, 3, name)
	if m.Text != "mean over 2 of 3 sites: site-a, site-b" || strings.Join(m.Absent, ",") != "site-c" || m.Round != 199 || m.Of != 3 {
		t.Errorf("2 of 3: %+v", m)
	}
	if m := NewMeanOver(4, []int{0, 1, 2}, 3, name); m.Text != "mean over all 3 sites" || len(m.Absent) != 0 {
		t.Errorf("all: %+v", m)
	}
}
