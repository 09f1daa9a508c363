// Package dashboard serves a networked coordinator's operations endpoints:
// a live page (embedded, no external assets, so it works offline), its
// JSON status and server-sent events, Prometheus metrics and a health check.
//
// Routes of Handler:
//
//	/             the page (plain JS; curves drawn as inline SVG)
//	/login        the token login (when the dashboard has a token): sets a
//	              session cookie so that a plain browser opens the page
//	/api/status   the current Status as JSON (events left out: see /api/log)
//	/api/log      a page of the event log: ?kind=&site=&q=&offset=&limit=&order=oldest
//	/api/events   server-sent events: one "status" event per change
//	/metrics      Prometheus exposition of Metrics
//	/healthz      "ok" while the coordinator runs
package dashboard

import (
	"time"

	"github.com/pfedmma/pfedmma/federation"
)

// SiteStatus is one site as the coordinator sees it.
type SiteStatus struct {
	Name        string    `json:"name"`
	ID          int       `json:"id"`
	Registered  bool      `json:"registered"`
	NumExamples int       `json:"num_examples"`
	State       string    `json:"state"`
	LastContact time.Time `json:"last_contact"`
	// Online is true when the site was heard from within three heartbeat
	// intervals.
	Online bool `json:"online"`
	// Refused counts the site's refused uploads by reason.
	Refused map[string]int `json:"refused,omitempty"`
}

// Job identifies the run the coordinator drives.
type Job struct {
	// Name is the configuration's name (may be empty).
	Name string `json:"name,omitempty"`
	// Method is the trained method, Preset the configuration's preset,
	// Protocol and Dataset how the data is cut and scored.
	Method   string `json:"method,omitempty"`
	Preset   string `json:"preset,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	Dataset  string `json:"dataset,omitempty"`
}

// Status is the federation's state, as shown by the page.
type Status struct {
	Job Job `json:"job"`
	// Phase is "waiting" (for sites to register), "running", "done" or
	// "failed".
	Phase string `json:"phase"`
	Error string `json:"error,omitempty"`
	Round int    `json:"round"`
	// Fingerprint is the configuration's fingerprint (sites must match it).
	Fingerprint string `json:"fingerprint,omitempty"`
	// Compress is how the tensors travel (federation.compress): the
	// rounds' bytes are the encoded bytes.
	Compress string `json:"compress,omitempty"`
	// Rounds is the federation's number of rounds (known before the
	// first one starts).
	Rounds int          `json:"rounds"`
	Sites  []SiteStatus `json:"sites"`
	// History holds the completed rounds' reports.
	History []federation.RoundReport `json:"history"`
	// Events are the event log's lines, oldest first (/api/status leaves
	// them out and says how many there are in EventCount; /api/log pages
	// them).
	Events     []Event   `json:"events,omitempty"`
	EventCount int       `json:"event_count"`
	Updated    time.Time `json:"updated"`
}

// Source provides the Status and signals its changes.
type Source interface {
	Status() Status
	// Subscribe returns a channel that receives a value after each change
	// (changes may be coalesced) and a function that ends the
	// subscription.
	Subscribe() (<-chan struct{}, func())
}
