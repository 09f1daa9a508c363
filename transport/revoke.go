package transport

import (
	"context"
	"crypto/x509"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/dashboard"
)

// RevocationInterval is how often the coordinator re-reads the revocation
// list (certs revoke) to cut off revoked sites that are connected.
const RevocationInterval = time.Second

// WatchRevocations re-reads dir's revocation list every interval until ctx
// ends and cuts off every site whose certificate it newly revokes
// (Revoke): the certificate its session registered with or, for a site
// not connected, the one of dir's sites/NAME.crt. An unreadable list is
// logged and retried (the last one read stays in force).
func (s *Server) WatchRevocations(ctx context.Context, dir string, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		rev, err := certs.ReadRevocations(dir)
		if err != nil {
			s.log.Error("revocation list not read", "dir", dir, "err", err)
		} else {
			for _, name := range s.revokedBy(rev, dir) {
				s.Revoke(name)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// revokedBy installs rev and returns the sites not yet revoked that it
// revokes.
func (s *Server) revokedBy(rev *certs.Revocations, dir string) []string {
	s.mu.Lock()
	s.revList = rev
	var cands []*siteState
	var out []string
	for _, st := range s.sites {
		switch {
		case st.revoked:
		case rev.Names[st.name]:
			out = append(out, st.name)
		case st.cert != nil:
			if bad, _ := rev.Revokes(st.cert); bad {
				out = append(out, st.name)
			}
		default:
			cands = append(cands, st)
		}
	}
	s.mu.Unlock()
	noted := rev.Noted()
	for _, st := range cands {
		if !noted[st.name] {
			continue
		}
		// not connected: its current certificate is the folder's (when
		// the coordinator's folder holds it)
		c, err := certs.ReadCertificate(filepath.Join(dir, certs.SitesDir, st.name+".crt"))
		if err != nil {
			continue
		}
		if bad, _ := rev.Revokes(c); bad {
			out = append(out, st.name)
		}
	}
	return out
}

// checkRevoked refuses a request of st made with a revoked certificate,
// or of a revoked site. A revoked site registering (registering) with a
// certificate that is not revoked was re-keyed (certs rekey): it is
// accepted again. s.mu is held.
func (s *Server) checkRevoked(st *siteState, leaf *x509.Certificate, registering bool) error {
	if leaf != nil {
		if bad, why := s.revList.Revokes(leaf); bad {
			return status.Errorf(codes.PermissionDenied, "site %q: %s", st.name, why)
		}
	}
	if !st.revoked {
		return nil
	}
	if registering && leaf != nil && (s.revList == nil || !s.revList.Names[st.name]) {
		st.revoked, st.state, st.cert = false, "offline", leaf
		s.log.Warn("revoked site re-keyed: it registers with a new certificate", "site", st.name, "serial", certs.SerialHex(leaf))
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "site %q is revoked", st.name)
}

// Departed says why client id left the federation's schedule ("" when it
// did not): a revoked site is neither asked nor counted absent until it
// is re-keyed. It is the federation.Coordinator's Departed.
func (s *Server) Departed(id int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id >= 0 && id < len(s.sites) && s.sites[id].revoked {
		return fmt.Sprintf("site %q is revoked", s.sites[id].name)
	}
	return ""
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
	close(s.regWake) // WaitRegistered no longer waits for it
	s.regWake = make(chan struct{})
	round := s.status.Round
	s.mu.Unlock()
	for _, t := range cut {
		t.done <- taskResult{err: fmt.Errorf("site %q round %d %s: the site's certificate was revoked", name, t.round, t.kind)}
	}
	s.log.Warn("site revoked: cut off", "site", name, "tasks_failed", len(cut))
	s.audit(dashboard.Event{Round: round, Site: name, Kind: "revoked", Message: fmt.Sprintf("certificate revoked; %d pending tasks failed", len(cut))})
	s.changed()
}
