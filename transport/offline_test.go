package transport

import (
	"testing"
	"time"
)

// TestHeartbeatFollowsOfflineAfter: a --offline-after shorter than three
// default heartbeats asks the sites to heartbeat every third of it, so that
// a live site is never read offline between two heartbeats; a long one
// keeps the default.
func TestHeartbeatFollowsOfflineAfter(t *testing.T) {
	for _, c := range []struct{ offline, want time.Duration }{
		{2 * time.Second, 2 * time.Second / 3},
		{time.Minute, 5 * time.Second},
	} {
		s, err := NewServer(ServerConfig{Sites: []string{"a"}, Insecure: true, OfflineAfter: c.offline, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if s.cfg.Heartbeat != c.want || s.cfg.Heartbeat*3 > s.cfg.OfflineAfter {
			t.Errorf("--offline-after %v: heartbeat %v, want %v", c.offline, s.cfg.Heartbeat, c.want)
		}
	}
}

// TestEndNotWaitedForOffline: after the last round the coordinator waits
// until the online sites learned the end, not for an offline one (a dead
// site would hold it for the whole linger).
func TestEndNotWaitedForOffline(t *testing.T) {
	s, err := NewServer(ServerConfig{Sites: []string{"a", "b"}, Insecure: true, OfflineAfter: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	a, b := s.sites[0], s.sites[1]
	a.registered, a.live, a.lastContact = true, true, time.Now()
	b.registered, b.live, b.lastContact = true, true, time.Now().Add(-time.Minute) // dead
	if s.AllToldDone() {
		t.Fatal("AllToldDone before the online site was told")
	}
	a.toldDone = true
	if !s.AllToldDone() {
		t.Fatal("AllToldDone waits for the offline site")
	}
	b.lastContact = time.Now() // back online, not told yet
	if s.AllToldDone() {
		t.Fatal("AllToldDone with an online site not told")
	}
}
