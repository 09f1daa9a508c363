package transport

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/certs"
)

// procFed is a federation of testnode processes: certificates for n sites
// and the coordinator's address and state database.
type procFed struct {
	bin, dir, addr, db string
	sites              []string
}

func newProcFed(t *testing.T, n int) *procFed {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs processes; skipped with -short")
	}
	f := &procFed{bin: testnode(t), dir: t.TempDir()}
	for i := range n {
		f.sites = append(f.sites, fmt.Sprintf("site-%d", i))
	}
	if err := certs.Init(f.dir, f.sites, nil); err != nil {
		t.Fatal(err)
	}
	f.addr, f.db = freePort(t), filepath.Join(f.dir, "coord.db")
	return f
}

func (f *procFed) coord(t *testing.T, args ...string) *proc {
	t.Helper()
	p := start(t, f.bin, append([]string{"-role", "coord", "-certs", f.dir, "-state", f.db, "-addr", f.addr}, args...)...)
	p.waitLine(t, 10*time.Second, "coordinator listening")
	return p
}

// site starts site i with its state in state/<name><suffix>.
func (f *procFed) site(t *testing.T, i int, suffix string, args ...string) *proc {
	t.Helper()
	return start(t, f.bin, append([]string{"-role", "site", "-certs", f.dir, "-site", f.sites[i], "-addr", f.addr,
		"-state", filepath.Join(f.dir, "state", f.sites[i]+suffix)}, args...)...)
}

// ended waits for p to end and returns its error (nil: exit 0).
func ended(t *testing.T, p *proc, d time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		t.Fatalf("process still running after %v:\n%s", d, p.output())
		return nil
	}
}

// TestProcessDuplicateSession: a second process started with site-0's
// certificate (another state folder) while site-0 trains is refused: it
// exits non-zero saying another process serves the site, the coordinator
// logs the refusal and writes it to events.jsonl, and the federation's
// result is the uninterrupted one (nothing of the second process was
// aggregated).
func TestProcessDuplicateSession(t *testing.T) {
	t.Parallel() // processes that wait on each other and the network, not the CPU
	// rounds enough that the first session is still connected when the
	// second one gives up (-duplicate-grace)
	const n, rounds, seed = 3, 20, 7
	f := newProcFed(t, n)
	want, _ := reference(t, n, rounds, 1, seed)
	// -offline-after: a loaded machine must not make the first session
	// look gone (then the second would take over, as it should)
	coord := f.coord(t, "-rounds", fmt.Sprint(rounds), "-seed", fmt.Sprint(seed), "-offline-after", "10s")
	var sites []*proc
	for i := range n {
		sites = append(sites, f.site(t, i, "", "-delay", "150ms"))
	}
	coord.waitLine(t, 20*time.Second, `msg="round done"`, "round=1")
	dup := f.site(t, 0, "-copy", "-duplicate-grace", "700ms")
	err := ended(t, dup, 20*time.Second)
	if err == nil || !strings.Contains(dup.output(), "already connected from another process") {
		t.Fatalf("the second process: %v, want a refusal saying another process serves site-0:\n%s", err, dup.output())
	}
	coord.waitLine(t, 5*time.Second, "refused: a second process uses this site's certificate", "site=site-0")
	sameNamed(t, final(t, coord), want)
	for i, p := range sites {
		if err := ended(t, p, 10*time.Second); err != nil {
			t.Errorf("site %d: %v\n%s", i, err, p.output())
		}
	}
	ev, err := os.ReadFile(filepath.Join(f.dir, EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ev), `"site":"site-0"`) || !strings.Contains(string(ev), "second session on one certificate") {
		t.Fatalf("events.jsonl does not record the second session:\n%s", ev)
	}
}

// TestProcessFullDisk: the coordinator's disk fills after round 2 (its
// state database can no longer grow): the coordinator ends non-zero with
// its own storage error, the sites are told the coordinator failed (not
// that their uploads were malformed, and not the database's path) and exit
// non-zero; restarted on a disk with room, the coordinator resumes from
// round 3 and ends with the uninterrupted run's result (nothing saved was
// lost).
func TestProcessFullDisk(t *testing.T) {
	t.Parallel() // processes that wait on each other and the network, not the CPU
	const n, rounds, seed = 3, 6, 7
	f := newProcFed(t, n)
	want, _ := reference(t, n, rounds, 1, seed)
	// -offline-after: no site read offline on a loaded machine (the
	// result must be the uninterrupted run's)
	args := []string{"-rounds", fmt.Sprint(rounds), "-seed", fmt.Sprint(seed), "-tolerate", "-retry-every", "200ms", "-offline-after", "10s"}
	coord := f.coord(t, append(args, "-full-disk-after-round", "2")...)
	var sites []*proc
	for i := range n {
		sites = append(sites, f.site(t, i, "", "-delay", "50ms"))
	}
	if err := ended(t, coord, 30*time.Second); err == nil {
		t.Fatalf("the coordinator ended 0 on a full disk:\n%s", coord.output())
	}
	out := coord.output()
	if !strings.Contains(out, "testnode: the coordinator's storage failed") {
		t.Fatalf("the coordinator did not end with its storage error:\n%s", out)
	}
	if strings.Contains(out, "reason=malformed") || !strings.Contains(out, "reason=coordinator_error") {
		t.Fatalf("uploads refused as the sites' fault, or not as the coordinator's:\n%s", out)
	}
	for i, p := range sites {
		err := ended(t, p, 15*time.Second)
		so := p.output()
		if err == nil || !strings.Contains(so, "the coordinator failed: the coordinator's storage failed") {
			t.Errorf("site %d: %v, want told the coordinator's storage failed:\n%s", i, err, so)
		}
		if strings.Contains(so, "malformed") || strings.Contains(so, f.db) {
			t.Errorf("site %d was told of a malformed upload or the database's path:\n%s", i, so)
		}
	}
	coord = f.coord(t, args...)
	for i := range n {
		f.site(t, i, "", "-delay", "50ms")
	}
	coord.waitLine(t, 10*time.Second, "resuming", "next_round=3")
	sameNamed(t, final(t, coord), want)
}
