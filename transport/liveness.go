package transport

import (
	"context"
	"fmt"
	"time"
)

// WaitRegistered blocks until every site (but the revoked ones) has
// registered with this coordinator process or ctx ends. After deadline (when positive) it
// returns once at least minLive sites are online, logging the missing ones
// (and, until then, every deadline).
func (s *Server) WaitRegistered(ctx context.Context, deadline time.Duration, minLive int) error {
	var expire <-chan time.Time
	if deadline > 0 {
		tm := time.NewTimer(deadline)
		defer tm.Stop()
		expire = tm.C
	}
	late := false
	for {
		s.mu.Lock()
		var missing []string
		revoked := 0
		for _, st := range s.sites {
			switch {
			case st.revoked:
				revoked++ // not waited for: it left the schedule
			case !st.live || !s.alive(st):
				missing = append(missing, st.name)
			}
		}
		wake := s.regWake
		s.mu.Unlock()
		online := len(s.sites) - len(missing) - revoked
		if len(missing) == 0 {
			return nil
		}
		if late && online >= max(minLive, 1) {
			s.log.Warn("registration deadline passed: starting without the missing sites", "online", online, "missing", missing)
			s.event(0, "", "register-timeout", fmt.Sprintf("started without %v", missing))
			return nil
		}
		var tick <-chan time.Time
		if late {
			tick = time.After(min(deadline, time.Minute))
		} else {
			tick = time.After(min(time.Minute, s.cfg.OfflineAfter))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("transport: waiting for sites %v to register: %w", missing, ctx.Err())
		case <-wake:
		case <-expire:
			late, expire = true, nil
			if online < max(minLive, 1) {
				s.log.Warn("registration deadline passed with too few sites online (--min-fit): waiting", "online", online, "need", max(minLive, 1), "missing", missing)
			}
		case <-tick:
			if late {
				s.log.Warn("waiting for sites to register", "online", online, "need", max(minLive, 1), "missing", missing)
			}
		}
	}
}

// alive reports whether st is online: registered with this coordinator
// process and heard from within OfflineAfter. s.mu must be held.
func (s *Server) alive(st *siteState) bool {
	return st.live && !st.revoked && time.Since(st.lastContact) < s.cfg.OfflineAfter
}

// Unavailable says why client id is not available ("" when it is): it
// is the federation.Coordinator's Unavailable.
func (s *Server) Unavailable(id int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case id < 0 || id >= len(s.sites):
		return "unknown site"
	case s.sites[id].revoked:
		return fmt.Sprintf("site %q is revoked", s.sites[id].name)
	case !s.alive(s.sites[id]):
		return "offline (heartbeat missed)"
	}
	return ""
}

// Available reports whether client id is online (see ServerConfig.OfflineAfter);
// it is the federation.Coordinator's Available.
func (s *Server) Available(id int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return id >= 0 && id < len(s.sites) && s.alive(s.sites[id])
}

// SiteName returns client id's site name.
func (s *Server) SiteName(id int) string {
	if id >= 0 && id < len(s.sites) {
		return s.sites[id].name
	}
	return fmt.Sprint(id)
}
