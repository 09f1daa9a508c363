// Package dashboard serves a networked coordinator's operations endpoints:
// a live page (embedded, no external assets, so it works offline), its
// JSON status and server-sent events, Prometheus metrics and a health check.
//
// Routes of Handler:
//
//	/             the page (plain JS; curves drawn as inline SVG)
//	/api/status   the current Status as JSON
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

// Status is the federation's state, as shown by the page.
type Status struct {
	// Phase is "waiting" (for sites to register), "running", "done" or
	// "failed".
	Phase string `json:"phase"`
	Error string `json:"error,omitempty"`
	Round int    `json:"round"`
	// Fingerprint is the configuration's fingerprint (sites must match it).
	Fingerprint string `json:"fingerprint,omitempty"`
	// Compress is how the tensors travel (federation.compress): the
	// rounds' bytes are the encoded bytes.
	Compress string       `json:"compress,omitempty"`
	Rounds   int          `json:"rounds"`
	Sites    []SiteStatus `json:"sites"`
	// History holds the completed rounds' reports.
	History []federation.RoundReport `json:"history"`
	// Events are the latest lines of the event log, oldest first.
	Events  []Event   `json:"events"`
	Updated time.Time `json:"updated"`
}

// Source provides the Status and signals its changes.
type Source interface {
	Status() Status
	// Subscribe returns a channel that receives a value after each change
	// (changes may be coalesced) and a function that ends the
	// subscription.
	Subscribe() (<-chan struct{}, func())
}
