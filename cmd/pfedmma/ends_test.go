package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeSIGTERMEndsSites: SIGTERM on serve mid-run ends it as a stop,
// not a failure: serve writes the outputs of the rounds done and exits 0,
// and every site is told why and exits 0 (instead of "context canceled"
// and sites retrying forever).
func TestServeSIGTERMEndsSites(t *testing.T) {
	t.Parallel()
	f := newOpsFed(t, 60)
	serve := f.serve("--offline-after", "20s")
	sites := []*opsProc{f.site("site-a"), f.site("site-b"), f.site("site-c")}
	serve.waitLine(t, 120*time.Second, `msg="round done"`, "round=1")
	if err := serve.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	expectExit(t, serve, 90*time.Second, 0)
	for _, s := range sites {
		expectExit(t, s, 60*time.Second, 0)
		if out := s.output(); !strings.Contains(out, "the coordinator stopped before the last round") || !strings.Contains(out, "restart it with the same flags") {
			t.Errorf("%s does not say why it ends:\n%s", s.name, tail(out))
		}
	}
	if out := serve.output(); strings.Contains(out, "context canceled") || !strings.Contains(out, "stopped") {
		t.Errorf("serve's output:\n%s", tail(out))
	}
	rounds := readRounds(t, f.coordOut)
	if len(rounds) < 2 || len(rounds) >= 60 {
		t.Fatalf("metrics.jsonl holds %d rounds, want the rounds done before SIGTERM", len(rounds))
	}
	if _, err := os.Stat(filepath.Join(f.coordOut, "summary.json")); err != nil {
		t.Fatalf("no summary.json after SIGTERM: %v", err)
	}
	// started again while serve is down, a stopped site waits for the
	// coordinator's restart (serve resumes), saying so and for how long
	again := f.site("site-a")
	again.waitLine(t, 60*time.Second, "stopped this federation before its last round", "waiting for it to be restarted")
	again.waitLine(t, 60*time.Second, "coordinator unreachable", "unreachable_for=")
	if !again.running() {
		t.Fatalf("the stopped site, started again, ended:\n%s", tail(again.output()))
	}
}

// TestServeRestartedOnFinishedRun: serve restarted on the state of a
// finished run says the run is finished and exits 0 at once, waiting for
// no site; a site started then is told the federation is over and exits 0.
func TestServeRestartedOnFinishedRun(t *testing.T) {
	t.Parallel()
	f := newOpsFed(t, 2)
	serve := f.serve()
	sites := []*opsProc{f.site("site-a"), f.site("site-b"), f.site("site-c")}
	expectExit(t, serve, 180*time.Second, 0)
	for _, s := range sites {
		expectExit(t, s, 30*time.Second, 0)
	}
	again := f.serve()
	// a fresh state folder: the coordinator, not the site's record of the
	// end (TestSiteAfterFederationFinished), tells it the run is over
	late := f.site("site-a", "--state", "site-a-late")
	expectExit(t, again, 60*time.Second, 0)
	if out := again.output(); !strings.Contains(out, "this run is finished") {
		t.Fatalf("the restarted serve does not say the run is finished:\n%s", tail(out))
	}
	expectExit(t, late, 60*time.Second, 0)
	if rounds := readRounds(t, f.coordOut); len(rounds) != 2 || !slices.Equal(rounds[1].Participants, []int{0, 1, 2}) {
		t.Fatalf("the outputs after the restart: %+v", rounds)
	}
}

// TestSiteAfterFederationFinished: a site started again, after its
// coordinator's process has exited, on the state folder of a federation
// that finished exits 0 within seconds saying so (instead of retrying
// forever): the folder records the end. For another coordinator (another
// address) the record does not apply: that site keeps retrying, and its log
// says what it waits for and for how long so far.
func TestSiteAfterFederationFinished(t *testing.T) {
	t.Parallel()
	f := newOpsFed(t, 2)
	serve := f.serve()
	sites := []*opsProc{f.site("site-a"), f.site("site-b"), f.site("site-c")}
	expectExit(t, serve, 180*time.Second, 0)
	for _, s := range sites {
		expectExit(t, s, 30*time.Second, 0)
	}
	record := filepath.Join(f.dir, "site-site-a", "state", "federation-over.json")
	if b := readFileString(t, record); !strings.Contains(b, `"ended": "finished"`) || !strings.Contains(b, f.addr) {
		t.Fatalf("%s:\n%s", record, b)
	}
	again := f.site("site-a")
	t0 := time.Now()
	expectExit(t, again, 30*time.Second, 0)
	if d := time.Since(t0); d > 20*time.Second {
		t.Errorf("the site took %v to say its federation is over", d)
	}
	if out := again.output(); !strings.Contains(out, "is over") || !strings.Contains(out, "federation-over.json") || !strings.Contains(out, f.addr) {
		t.Fatalf("the site does not say its federation is over, naming the coordinator and the record:\n%s", tail(out))
	}
	if strings.Contains(again.output(), "coordinator unreachable") {
		t.Fatalf("the site tried the coordinator:\n%s", tail(again.output()))
	}
	// the same folder, another coordinator: the record does not apply
	elsewhere := f.start("site-a-elsewhere", append([]string{"site", "--server", freeAddr(t), "--certs", "certs", "--name", "site-a", "--data", "world"}, f.sets...)...)
	elsewhere.waitLine(t, 60*time.Second, "coordinator unreachable", "waiting for the coordinator", "unreachable_for=")
	time.Sleep(3 * time.Second)
	if !elsewhere.running() {
		t.Fatalf("a site for another coordinator ended:\n%s", tail(elsewhere.output()))
	}
}
