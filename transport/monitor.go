package transport

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
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
		s.metrics.PayloadIn.Add(float64(rep.BytesUp))
		s.metrics.PayloadOut.Add(float64(rep.BytesDown))
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

// Prime shows job and the federation's rounds on the dashboard before the
// first round, and the rounds the state database holds (a restarted
// coordinator's): registrations then carry the round the run resumes at.
// When the event log already held events (or the database rounds) it logs
// the restart as a "coordinator_restart" event, else a "coordinator_start".
func (s *Server) Prime(job dashboard.Job, rounds int) {
	var done []federation.RoundReport
	if s.cfg.Store != nil {
		rs, err := s.cfg.Store.Rounds()
		if err != nil {
			s.log.Error("the rounds done could not be read for the dashboard", "err", err)
		}
		done = rs
	}
	s.mu.Lock()
	s.status.Job, s.status.Rounds = job, rounds
	if len(done) > 0 && len(s.status.History) == 0 {
		s.status.History, s.status.Round = slices.Clone(done), done[len(done)-1].Round+1
	}
	round := s.status.Round
	s.mu.Unlock()
	if earlier := s.cfg.Events.Earlier(); earlier > 0 || len(done) > 0 {
		msg := fmt.Sprintf("coordinator restarted: %d of %d rounds done, resuming at round %d", len(done), rounds, round)
		if n := s.cfg.Events.Skipped(); n > 0 {
			msg += fmt.Sprintf(" (%d unreadable lines of the event log skipped)", n)
		}
		s.event(round, "", "coordinator_restart", msg)
	} else {
		s.event(round, "", "coordinator_start", fmt.Sprintf("coordinator started: %s, %d rounds", jobText(job), rounds))
	}
	s.changed()
}

// jobText is job in words, e.g. "pfedmma on world (base2novel, preset
// world-deploy)".
func jobText(j dashboard.Job) string {
	out := cmp.Or(j.Method, "a method")
	if j.Dataset != "" {
		out += " on " + j.Dataset
	}
	var in []string
	if j.Protocol != "" {
		in = append(in, j.Protocol)
	}
	if j.Preset != "" {
		in = append(in, "preset "+j.Preset)
	}
	if len(in) > 0 {
		out += " (" + strings.Join(in, ", ") + ")"
	}
	return out
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
