package dashboard

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// Event is one line of the coordinator's event (audit) log.
type Event struct {
	Time  time.Time `json:"time"`
	Round int       `json:"round"`
	// Site is the site concerned ("" for the federation as a whole).
	Site string `json:"site,omitempty"`
	// Kind is "register", "refused", "failure", "round_start" or
	// "round_end" (others may be added).
	Kind string `json:"kind"`
	// Reason is a refusal's reason code.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message"`
}

// maxRecent is how many events the dashboard shows.
const maxRecent = 200

// EventLog appends events as JSON lines to a file (when one is open) and
// keeps the latest ones for the dashboard. The zero value keeps them in
// memory only. It is safe for concurrent use.
type EventLog struct {
	mu     sync.Mutex
	f      *os.File
	path   string
	recent []Event
}

// OpenEventLog opens (creating or appending to) the JSON-lines file path.
func OpenEventLog(path string) (*EventLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("event log: %w", err)
	}
	return &EventLog{f: f, path: path}, nil
}

// Add records e (its Time set to now when zero). A failed write is
// returned; the event is kept in memory regardless.
func (l *EventLog) Add(e Event) error {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recent = append(l.recent, e)
	if len(l.recent) > maxRecent {
		l.recent = append(l.recent[:0:0], l.recent[len(l.recent)-maxRecent:]...)
	}
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

// Recent returns the latest events, oldest first.
func (l *EventLog) Recent() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.recent...)
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
