package transport

import (
	"maps"
	"slices"
	"time"

	"github.com/pfedmma/pfedmma/dashboard"
	"github.com/pfedmma/pfedmma/federation"
)

// Observe hooks the server's status and metrics into coord (chaining the
// OnRound and Progress already set) and records the rounds done so far.
func (s *Server) Observe(coord *federation.Coordinator, done []federation.RoundReport) {
	s.mu.Lock()
	s.status.Rounds = coord.Rounds
	s.status.History = slices.Clone(done)
	s.status.Round = len(done)
	s.status.Phase = "running"
	s.mu.Unlock()
	s.changed()
	onRound, progress := coord.OnRound, coord.Progress
	coord.OnRound = func(rep federation.RoundReport) error {
		s.metrics.Rounds.Inc()
		s.metrics.Participants.Set(float64(len(rep.Selected) - len(rep.Failures)))
		s.metrics.Failures.Add(float64(len(rep.Failures)))
		s.metrics.RoundSeconds.Observe(rep.Seconds)
		s.mu.Lock()
		s.status.History = append(s.status.History, rep)
		s.status.Round = rep.Round + 1
		s.mu.Unlock()
		s.roundEnded(rep)
		s.changed()
		if onRound != nil {
			return onRound(rep)
		}
		return nil
	}
	coord.Progress = func(p federation.Progress) {
		s.changed()
		if progress != nil {
			progress(p)
		}
	}
}

// Status implements dashboard.Source.
func (s *Server) Status() dashboard.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.status
	out.History = slices.Clone(s.status.History)
	out.Updated = time.Now()
	for _, st := range s.sites {
		ss := dashboard.SiteStatus{Name: st.name, ID: st.id, Registered: st.registered, NumExamples: st.numExamples,
			State: st.state, LastContact: st.lastContact, Online: time.Since(st.lastContact) < 3*s.cfg.Heartbeat,
			Refused: maps.Clone(st.refused)}
		if !ss.Online && st.registered && st.state != "done" && !st.revoked {
			ss.State = "offline"
		}
		out.Sites = append(out.Sites, ss)
	}
	out.Events = s.cfg.Events.Recent()
	return out
}

// Subscribe implements dashboard.Source.
func (s *Server) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	s.subs[ch] = true
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(s.subs, ch)
		s.mu.Unlock()
	}
}

func (s *Server) changed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (s *Server) event(round int, site, kind, msg string) {
	s.audit(dashboard.Event{Round: round, Site: site, Kind: kind, Message: msg})
	if s.cfg.Store == nil {
		return
	}
	if err := s.cfg.Store.Event(round, site, kind, msg); err != nil {
		s.log.Error("event not recorded", "round", round, "site", site, "err", err)
	}
}

// round is the current round. s.mu must not be held.
func (s *Server) round() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status.Round
}
