package transport

import (
	"errors"
	"testing"
)

// TestSettleKeepsRevoked: a task the site was answering when it was revoked
// may still be settled with a refusal (finish, not finishUnlessRevoked); the
// site must stay "revoked" — before this, settle set it back to "idle" and
// TestRevokedSiteRekeyed waited for "revoked" in vain when the race hit.
func TestSettleKeepsRevoked(t *testing.T) {
	s := &Server{answered: map[string]bool{}, closed: map[string]int{}}
	st := &siteState{name: "site-1", state: "revoked", revoked: true} // as Revoke leaves it
	tk := &task{id: "t1", site: st, state: taskAnswering, done: make(chan taskResult, 1)}
	st.queue = []*task{tk}
	s.finish(tk, taskResult{err: errors.New("upload refused")})
	if st.state != "revoked" {
		t.Fatalf("site state %q after settling a revoked site's task, want revoked", st.state)
	}
	if len(st.queue) != 0 || !s.answered["t1"] {
		t.Fatalf("task not settled: queue %d, answered %v", len(st.queue), s.answered["t1"])
	}
	st2 := &siteState{name: "site-2", state: "training"}
	tk2 := &task{id: "t2", site: st2, state: taskAnswering, done: make(chan taskResult, 1)}
	s.finish(tk2, taskResult{})
	if st2.state != "idle" {
		t.Fatalf("site state %q after its answer, want idle", st2.state)
	}
}
