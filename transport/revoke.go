package transport

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/dashboard"
)

// RevocationInterval is how often the coordinator re-reads the revocation
// list (certs revoke) to cut off revoked sites that are connected.
const RevocationInterval = time.Second

// WatchRevocations re-reads dir's revocation list every interval until ctx
// ends and cuts off every newly revoked site (Revoke). An unreadable list
// is logged and retried.
func (s *Server) WatchRevocations(ctx context.Context, dir string, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		rev, err := certs.Revoked(dir)
		if err != nil {
			s.log.Error("revocation list not read", "dir", dir, "err", err)
		}
		for name := range rev {
			s.Revoke(name)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Revoke cuts site name off at once: its pending tasks fail (so the round
// goes on without it), its waiting task polls end, and every later call of
// it is refused. It does nothing for an unknown or already revoked site.
func (s *Server) Revoke(name string) {
	s.mu.Lock()
	st := s.byName[name]
	if st == nil || st.revoked {
		s.mu.Unlock()
		return
	}
	st.revoked, st.state = true, "revoked"
	var cut []*task
	for _, t := range st.queue {
		if t.state == taskPending {
			t.state = taskClosed
			s.closed[t.id] = t.round
			cut = append(cut, t)
		}
	}
	st.queue = slices.DeleteFunc(st.queue, func(t *task) bool { return t.state == taskClosed })
	close(st.wake)
	st.wake = make(chan struct{})
	round := s.status.Round
	s.mu.Unlock()
	for _, t := range cut {
		t.done <- taskResult{err: fmt.Errorf("site %q round %d %s: the site's certificate was revoked", name, t.round, t.kind)}
	}
	s.log.Warn("site revoked: cut off", "site", name, "tasks_failed", len(cut))
	s.audit(dashboard.Event{Round: round, Site: name, Kind: "revoked", Message: fmt.Sprintf("certificate revoked; %d pending tasks failed", len(cut))})
	s.changed()
}
