package dashboard

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEventLogKeptFromTheStart: the log keeps every event of a long run in
// memory (the first registration after thousands of events), and a
// reopened file gives them back — a restarted coordinator shows its whole
// history — even after a crash tore its last line.
func TestEventLogKeptFromTheStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	l, err := OpenEventLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if l.Earlier() != 0 {
		t.Fatalf("a new log has %d earlier events", l.Earlier())
	}
	l.Add(Event{Round: 0, Site: "site-a", Kind: "register", Message: "first"})
	for r := range 1000 {
		l.Add(Event{Round: r, Kind: "round_end", Message: fmt.Sprint(r)})
	}
	if ev := l.Recent(); len(ev) != 1001 || ev[0].Message != "first" {
		t.Fatalf("the log keeps %d events, the first %+v; want 1001 from the first registration", len(ev), ev[0])
	}
	l.Close()
	// a crash tears the last line
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"time":"2026-01-01T00:00:00Z","kind":"round_`)
	f.Close()
	l, err = OpenEventLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if l.Earlier() != 1001 || l.Skipped() != 1 {
		t.Errorf("reopened: %d earlier events, %d skipped lines; want 1001 and 1", l.Earlier(), l.Skipped())
	}
	l.Add(Event{Round: 1000, Kind: "coordinator_restart", Message: "again"})
	l.Close()
	l, err = OpenEventLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ev := l.Recent()
	if len(ev) != 1002 || ev[0].Message != "first" || ev[1001].Kind != "coordinator_restart" || l.Skipped() != 1 {
		t.Fatalf("after a torn line and a restart: %d events (first %q, last %q), %d skipped; want 1002, first, coordinator_restart, 1",
			len(ev), ev[0].Message, ev[len(ev)-1].Kind, l.Skipped())
	}
}

// TestEventQuery: /api/log pages the events newest or oldest first,
// filtered by kind, site and text, and names a bad parameter.
func TestEventQuery(t *testing.T) {
	src := newFake()
	for r := range 60 {
		src.log.Add(Event{Round: r, Kind: "round_end", Message: fmt.Sprintf("round %d done", r)})
		if r%20 == 0 {
			src.log.Add(Event{Round: r, Site: "site-b", Kind: "refused", Reason: "examples", Message: fmt.Sprintf("claims %d examples", r)})
		}
	}
	ts := httptest.NewServer(Handler(src, NewMetrics()))
	defer ts.Close()
	get := func(q string) (EventPage, int, string) {
		resp, err := http.Get(ts.URL + "/api/log?" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var p EventPage
		if resp.StatusCode == 200 {
			if err := json.Unmarshal(b, &p); err != nil {
				t.Fatal(err)
			}
		}
		return p, resp.StatusCode, string(b)
	}
	msgs := func(p EventPage) string {
		var out []string
		for _, e := range p.Events {
			out = append(out, e.Message)
		}
		return strings.Join(out, "|")
	}
	for _, c := range []struct{ q, want string }{
		{"limit=2", "round 59 done|round 58 done"},
		{"limit=2&order=oldest", "round 0 done|claims 0 examples"},
		{"limit=2&offset=1&order=oldest", "claims 0 examples|round 1 done"},
		{"kind=refused", "claims 40 examples|claims 20 examples|claims 0 examples"},
		{"site=site-b&order=oldest&limit=1", "claims 0 examples"},
		{"q=ROUND+5&limit=3", "round 59 done|round 58 done|round 57 done"},
		{"q=examples&kind=round_end", ""},
	} {
		p, code, body := get(c.q)
		if code != 200 || msgs(p) != c.want {
			t.Errorf("/api/log?%s: %d %q, want %q (%s)", c.q, code, msgs(p), c.want, body)
		}
	}
	p, _, _ := get("kind=refused&limit=1")
	if p.Total != 3 || p.All != 63 || strings.Join(p.Kinds, ",") != "refused,round_end" || strings.Join(p.Sites, ",") != "site-b" {
		t.Errorf("page counts: total %d of %d, kinds %v, sites %v; want 3 of 63, refused+round_end, site-b", p.Total, p.All, p.Kinds, p.Sites)
	}
	for _, q := range []string{"limit=-1", "limit=501", "offset=x"} {
		_, code, body := get(q)
		key, _, _ := strings.Cut(q, "=")
		if code != http.StatusBadRequest || !strings.Contains(body, key+"=") {
			t.Errorf("/api/log?%s: %d %q, want 400 naming %s", q, code, body, key)
		}
	}
	// /api/status counts the events instead of listing them
	resp, err := http.Get(ts.URL + "/api/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st map[string]any
	json.NewDecoder(resp.Body).Decode(&st)
	if st["event_count"] != float64(63) || st["events"] != nil {
		t.Errorf("/api/status: event_count %v, events %v; want 63 and none listed", st["event_count"], st["events"])
	}
}
