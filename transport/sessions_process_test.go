package transport

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestProcessRestartedSiteRejoins: a site killed -9 and started again
// (same state folder) rejoins the federation: after 45 s, its old session
// dead by then (-offline-after 30s), although it fetches its task first
// (the request that kept the dead session alive) and gives up after
// -duplicate-grace 10s; and at once, its old session still looking alive,
// since it presents the same state folder's instance.
func TestProcessRestartedSiteRejoins(t *testing.T) {
	for _, c := range []struct {
		name  string
		after time.Duration
	}{{"at-once", 0}, {"after-45s", 45 * time.Second}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newProcFed(t, 3)
			coord := f.coord(t, "-rounds", "100000", "-tolerate", "-min-fit", "1", "-offline-after", "30s", "-fetch-task")
			site := func(i int) *proc {
				return f.site(t, i, "", "-delay", "100ms", "-fetch-task", "-duplicate-grace", "10s")
			}
			site(0)
			site(1)
			victim := site(2)
			coord.waitLine(t, 60*time.Second, `msg="update accepted"`, "site=site-2")
			victim.kill()
			time.Sleep(c.after)
			t0 := time.Now()
			again := site(2)
			again.waitLine(t, 60*time.Second, "registered", "site=site-2")
			again.waitLine(t, 60*time.Second, "upload accepted")
			if d := time.Since(t0); c.after == 0 && d > 28*time.Second {
				t.Errorf("the restarted site took %v to rejoin: it waited for its old session to expire", d)
			}
			select {
			case <-again.done:
				t.Fatalf("the restarted site ended: %v\n%s", again.err, again.output())
			default:
			}
			if c.after == 0 && !strings.Contains(coord.output(), "the same state folder registered again") {
				t.Errorf("the coordinator did not log the restart:\n%s", tail(coord.output()))
			}
		})
	}
}

// TestProcessFinishedCoordinatorRestart: a coordinator restarted on the
// state of a finished run says so and exits 0 without waiting for any
// site, and a site started against it is told the federation is over and
// exits 0.
func TestProcessFinishedCoordinatorRestart(t *testing.T) {
	f := newProcFed(t, 2)
	coord := f.coord(t, "-rounds", "2")
	a, b := f.site(t, 0, ""), f.site(t, 1, "")
	final(t, coord)
	for _, p := range []*proc{a, b} {
		if err := ended(t, p, 20*time.Second); err != nil {
			t.Fatalf("site: %v\n%s", err, p.output())
		}
	}
	again := f.coord(t, "-rounds", "2")
	late := f.site(t, 0, "")
	if err := ended(t, again, 30*time.Second); err != nil {
		t.Fatalf("the restarted coordinator: %v\n%s", err, again.output())
	}
	if !strings.Contains(again.output(), "this run is finished") {
		t.Fatalf("the restarted coordinator does not say the run is finished:\n%s", again.output())
	}
	if err := ended(t, late, 20*time.Second); err != nil {
		t.Fatalf("a site of the finished run: %v\n%s", err, late.output())
	}
	if !strings.Contains(late.output(), "federation over") {
		t.Fatalf("the site was not told the federation is over:\n%s", late.output())
	}
}

// tail is the last lines of a process's output.
func tail(s string) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return fmt.Sprint(strings.Join(l[max(0, len(l)-40):], "\n"))
}
