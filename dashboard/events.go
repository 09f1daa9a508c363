package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Event is one line of the coordinator's event (audit) log.
type Event struct {
	Time  time.Time `json:"time"`
	Round int       `json:"round"`
	// Site is the site concerned ("" for the federation as a whole).
	Site string `json:"site,omitempty"`
	// Kind is "register", "refused", "failure", "offline", "revoked",
	// "round_start", "round_end", "coordinator_start" or
	// "coordinator_restart" (others may be added).
	Kind string `json:"kind"`
	// Reason is a refusal's reason code.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message"`
}

// MaxEvents bounds the events an EventLog keeps in memory (the file keeps
// them all): far more than a run of thousands of rounds logs, so that the
// dashboard shows the log from its start.
const MaxEvents = 200_000

// EventLog appends events as JSON lines to a file (when one is open) and
// keeps them (up to MaxEvents, the file's earlier lines included) for the
// dashboard. The zero value keeps them in memory only. It is safe for
// concurrent use.
type EventLog struct {
	mu     sync.Mutex
	f      *os.File
	path   string
	events []Event
	// earlier is how many events the file held when it was opened,
	// skipped how many of its lines were not events.
	earlier, skipped int
}

// OpenEventLog opens (creating or appending to) the JSON-lines file path
// and reads back the events it holds, so that the log survives a
// coordinator restart. Lines that are not events (a line torn by a crash)
// are skipped and counted (Skipped); a torn last line is ended so that the
// next event starts a line of its own.
func OpenEventLog(path string) (*EventLog, error) {
	old, skipped, torn, err := readEvents(path)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("event log: %w", err)
	}
	if torn {
		if _, err := f.Write([]byte{'\n'}); err != nil {
			f.Close()
			return nil, fmt.Errorf("event log %s: %w", path, err)
		}
	}
	l := &EventLog{f: f, path: path, earlier: len(old), skipped: skipped}
	l.keep(old...)
	return l, nil
}

// readEvents reads the events of the JSON-lines file path (none when it
// does not exist), the number of lines that are not events, and whether
// the file ends inside a line.
func readEvents(path string) (events []Event, skipped int, torn bool, err error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("event log: %w", err)
	}
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var e Event
		if json.Unmarshal(line, &e) != nil || e.Kind == "" {
			skipped++
			continue
		}
		events = append(events, e)
	}
	return events, skipped, len(b) > 0 && b[len(b)-1] != '\n', nil
}

// Skipped returns how many lines of the file were not events when it was
// opened.
func (l *EventLog) Skipped() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.skipped
}

// keep appends es to the memory, dropping the oldest beyond MaxEvents.
// l.mu must be held (or l not yet shared).
func (l *EventLog) keep(es ...Event) {
	l.events = append(l.events, es...)
	if len(l.events) > MaxEvents {
		l.events = append(l.events[:0:0], l.events[len(l.events)-MaxEvents:]...)
	}
}

// Earlier returns how many events the file held when it was opened (a
// coordinator that finds some was restarted).
func (l *EventLog) Earlier() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.earlier
}

// Add records e (its Time set to now when zero). A failed write is
// returned; the event is kept in memory regardless.
func (l *EventLog) Add(e Event) error {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keep(e)
	if l.f == nil {
		return nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("event log %s: %w", l.path, err)
	}
	if _, err := l.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("event log %s: %w", l.path, err)
	}
	return nil
}

// Recent returns the events kept, oldest first.
func (l *EventLog) Recent() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// Len returns how many events are kept.
func (l *EventLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events)
}

// Close closes the file.
func (l *EventLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// EventQuery selects a page of events: those of Kind and Site (either
// empty: any) whose message, kind, reason or site contains Text (case
// folded), newest first unless Oldest, Limit of them from Offset.
type EventQuery struct {
	Kind, Site, Text string
	Oldest           bool
	Offset, Limit    int
}

// EventPage is the answer to an EventQuery.
type EventPage struct {
	// Total is how many events match; All how many there are.
	Total  int     `json:"total"`
	All    int     `json:"all"`
	Offset int     `json:"offset"`
	Events []Event `json:"events"`
	// Kinds and Sites are the values present in the whole log (for the
	// filters' choices), sorted.
	Kinds []string `json:"kinds"`
	Sites []string `json:"sites"`
}

// QueryEvents answers q over es (oldest first).
func QueryEvents(es []Event, q EventQuery) EventPage {
	page := EventPage{All: len(es), Offset: max(q.Offset, 0), Kinds: []string{}, Sites: []string{}, Events: []Event{}}
	kinds, sites := map[string]bool{}, map[string]bool{}
	text := strings.ToLower(q.Text)
	var match []Event
	for _, e := range es {
		kinds[e.Kind] = true
		if e.Site != "" {
			sites[e.Site] = true
		}
		if (q.Kind == "" || e.Kind == q.Kind) && (q.Site == "" || e.Site == q.Site) && (text == "" || containsFold(e, text)) {
			match = append(match, e)
		}
	}
	if !q.Oldest {
		slices.Reverse(match)
	}
	page.Total = len(match)
	limit := q.Limit
	if limit <= 0 {
		limit = 25
	}
	if page.Offset < len(match) {
		page.Events = match[page.Offset:min(page.Offset+limit, len(match))]
	}
	for k := range kinds {
		page.Kinds = append(page.Kinds, k)
	}
	for s := range sites {
		page.Sites = append(page.Sites, s)
	}
	slices.Sort(page.Kinds)
	slices.Sort(page.Sites)
	return page
}

func containsFold(e Event, lower string) bool {
	for _, s := range []string{e.Message, e.Kind, e.Reason, e.Site} {
		if strings.Contains(strings.ToLower(s), lower) {
			return true
		}
	}
	return false
}
