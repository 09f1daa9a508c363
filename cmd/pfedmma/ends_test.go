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
	late := f.site("site-a")
	expectExit(t, again, 60*time.Second, 0)
	if out := again.output(); !strings.Contains(out, "this run is finished") {
		t.Fatalf("the restarted serve does not say the run is finished:\n%s", tail(out))
	}
	expectExit(t, late, 60*time.Second, 0)
	if rounds := readRounds(t, f.coordOut); len(rounds) != 2 || !slices.Equal(rounds[1].Participants, []int{0, 1, 2}) {
		t.Fatalf("the outputs after the restart: %+v", rounds)
	}
}
