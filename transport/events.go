package transport

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	"github.com/pfedmma/pfedmma/dashboard"
	"github.com/pfedmma/pfedmma/federation"
)

// audit appends e to the event log (the JSON-lines file in the state
// folder and the dashboard's list); a failed write is logged, not fatal.
func (s *Server) audit(e dashboard.Event) {
	if err := s.cfg.Events.Add(e); err != nil {
		s.log.Error("event log", "round", e.Round, "site", e.Site, "kind", e.Kind, "err", err)
	}
}

// siteRefused counts a refusal against st and logs it as an event.
func (s *Server) siteRefused(st *siteState, round int, r *refusal) {
	s.metrics.SiteRefused.WithLabelValues(st.name, r.code).Inc()
	s.mu.Lock()
	if st.refused == nil {
		st.refused = map[string]int{}
	}
	st.refused[r.code]++
	s.mu.Unlock()
	s.audit(dashboard.Event{Round: round, Site: st.name, Kind: "refused", Reason: r.code, Message: r.msg})
	s.changed()
}

// roundStarted logs the start of round once, when its first task is
// enqueued.
func (s *Server) roundStarted(round int) {
	s.mu.Lock()
	first := round > s.started
	if first {
		s.started = round
	}
	s.mu.Unlock()
	if first {
		s.audit(dashboard.Event{Round: round, Kind: "round_start", Message: fmt.Sprintf("round %d started", round)})
	}
}

// roundEnded logs the round's failures and its end.
func (s *Server) roundEnded(rep federation.RoundReport) {
	for _, id := range slices.Sorted(maps.Keys(rep.Failures)) {
		site := fmt.Sprint(id)
		if id >= 0 && id < len(s.sites) {
			site = s.sites[id].name
		}
		s.audit(dashboard.Event{Round: rep.Round, Site: site, Kind: "failure", Message: rep.Failures[id]})
	}
	msg := fmt.Sprintf("round %d done: %d selected, %d failed, %.3g s", rep.Round, len(rep.Selected), len(rep.Failures), rep.Seconds)
	if eps, ok := rep.Strategy["dp_epsilon"]; ok {
		msg += fmt.Sprintf(", DP ε %.4g", eps)
	}
	s.event(rep.Round, "", "round_end", msg)
}

// EventsFile is the name of the coordinator's event (audit) log, JSON
// lines, in the folder of its state database.
const EventsFile = "events.jsonl"

// OpenEvents opens the event log beside the state database statePath.
func OpenEvents(statePath string) (*dashboard.EventLog, error) {
	l, err := dashboard.OpenEventLog(filepath.Join(filepath.Dir(statePath), EventsFile))
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	return l, nil
}
