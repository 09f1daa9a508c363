package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/report"
	"github.com/pfedmma/pfedmma/rundir"
)

// TestRunResumeMissingCheckpoint: --resume of a run whose checkpoint was
// deleted is refused naming the file (before: it started again from round
// 0 without a word); --force runs it from round 0.
func TestRunResumeMissingCheckpoint(t *testing.T) {
	model := tinyWorldModel(t)
	out := filepath.Join(t.TempDir(), "run")
	if _, err := execute(t, tinyRunArgs(model, out, 2)...); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(out, "checkpoints", "pfedmma", "federation.ckpt")
	if err := os.Remove(ck); err != nil {
		t.Fatal(err)
	}
	// as a run stopped before it ended (a finished run has nothing to resume)
	if err := rundir.WriteRunMarker(out, rundir.RunMarker{Fingerprint: "stopped"}); err != nil {
		t.Fatal(err)
	}
	_, err := execute(t, append(tinyRunArgs(model, out, 2), "--resume")...)
	if err == nil || !strings.Contains(err.Error(), ck) {
		t.Fatalf("resume without checkpoint: error %v, want one naming %s", err, ck)
	}
	if _, err := execute(t, append(tinyRunArgs(model, out, 2), "--resume", "--force")...); err != nil {
		t.Fatal(err)
	}
}

// TestSIGTERMStopsAndResumes: `pfedmma run` sent SIGTERM mid-run exits with
// an error saying how to resume; --resume then finishes with the summary an
// uninterrupted run has.
func TestSIGTERMStopsAndResumes(t *testing.T) {
	bin, tmp := testBinary(t), t.TempDir()
	model := tinyWorldModel(t)
	const rounds = 6
	full := filepath.Join(tmp, "full")
	if b, err := exec.Command(bin, slowRunArgs(model, full, rounds)...).CombinedOutput(); err != nil {
		t.Fatalf("uninterrupted run: %v\n%s", err, b)
	}

	part := filepath.Join(tmp, "part")
	cmd := exec.Command(bin, slowRunArgs(model, part, rounds)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	var wg sync.WaitGroup
	wg.Add(1)
	sent := false
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stderr)
		var t0 time.Time
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "method=pfedmma round=0 ") {
				t0 = time.Now()
			}
			// a third of the way into pfedmma's third round
			if !sent && strings.Contains(sc.Text(), "method=pfedmma round=1 ") {
				sent = true
				go func(d time.Duration) {
					time.Sleep(d / 3)
					_ = cmd.Process.Signal(syscall.SIGTERM)
				}(time.Since(t0))
			}
		}
	}()
	wg.Wait()
	err = cmd.Wait()
	if !sent {
		t.Fatalf("the run ended before the signal could be sent:\n%s", log.String())
	}
	if err == nil {
		t.Fatalf("run ended with exit 0 after SIGTERM:\n%s", log.String())
	}
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	t.Logf("interrupted run ended with: %s", lines[len(lines)-1])
	if !strings.Contains(log.String(), "--resume --out "+part) {
		t.Fatalf("interrupted run does not say how to resume:\n%s", log.String())
	}
	if _, err := os.Stat(filepath.Join(part, "summary.json")); err == nil {
		t.Fatalf("interrupted run wrote a summary")
	}
	if b, err := exec.Command(bin, append(slowRunArgs(model, part, rounds), "--resume")...).CombinedOutput(); err != nil {
		t.Fatalf("resume: %v\n%s", err, b)
	}
	sa, err := report.ReadSummary(filepath.Join(full, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := report.ReadSummary(filepath.Join(part, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"zeroshot", "pfedmma"} {
		ma, _ := sa.Get(m)
		mb, _ := sb.Get(m)
		if len(ma) == 0 || len(ma) != len(mb) {
			t.Fatalf("%s: metrics %v vs %v", m, ma, mb)
		}
		for k, v := range ma {
			if mb[k] != v {
				t.Errorf("%s %s: resumed %v, uninterrupted %v", m, k, mb[k], v)
			}
		}
	}
}

// TestResumeFinishedRunChangesNothing: --resume of a finished run says so
// and changes no file, also when a site checkpoint is garbage (before: it
// exited 0 and rewrote the trained adapters).
func TestResumeFinishedRunChangesNothing(t *testing.T) {
	model := tinyWorldModel(t)
	out := filepath.Join(t.TempDir(), "run")
	if r := cli(t, cliOptions{}, tinyRunArgs(model, out, 2)...); r.Code != 0 {
		t.Fatalf("run: %s", r.Stderr)
	}
	sites, _ := filepath.Glob(filepath.Join(out, "checkpoints", "pfedmma", "site-*", "*"))
	if len(sites) == 0 {
		t.Fatal("no site checkpoint written")
	}
	for _, corrupt := range []bool{false, true} {
		if corrupt {
			if err := os.WriteFile(sites[0], []byte("garbage"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		before := snapshot(t, out)
		r := cli(t, cliOptions{}, append(tinyRunArgs(model, out, 2), "--resume")...)
		if r.Code != 0 || !strings.Contains(r.Stderr, "finished") || !strings.Contains(r.Stderr, "changed nothing") {
			t.Errorf("--resume of a finished run (garbage site checkpoint %v): exit %d\n%s", corrupt, r.Code, tail(r.Stderr))
		}
		after := snapshot(t, out)
		delete(before, rundir.LockFile)
		delete(after, rundir.LockFile)
		if d := diffSnapshots(before, after); len(d) > 0 {
			t.Errorf("--resume of a finished run (garbage site checkpoint %v) changed %v", corrupt, d)
		}
	}
}

// TestResumeKeepsFinishedSeeds: --resume of a run over several seeds that
// stopped in its last seed leaves the seeds that had ended untouched (even
// with a garbage site checkpoint there) and writes the mean over seeds.
func TestResumeKeepsFinishedSeeds(t *testing.T) {
	model := tinyWorldModel(t)
	out := filepath.Join(t.TempDir(), "run")
	args := append(tinyRunArgs(model, out, 1), "--set", "seeds=[1, 2]")
	if r := cli(t, cliOptions{}, args...); r.Code != 0 {
		t.Fatalf("run: %s", tail(r.Stderr))
	}
	// as if stopped during seed 2: no mean summary, the marker not finished
	if err := os.Remove(filepath.Join(out, "summary.json")); err != nil {
		t.Fatal(err)
	}
	if err := rundir.WriteRunMarker(out, rundir.RunMarker{Fingerprint: "stopped"}); err != nil {
		t.Fatal(err)
	}
	seed1 := filepath.Join(out, "seed_1")
	sites, _ := filepath.Glob(filepath.Join(seed1, "checkpoints", "pfedmma", "site-*", "*"))
	if len(sites) == 0 {
		t.Fatal("no site checkpoint in seed_1")
	}
	if err := os.WriteFile(sites[0], []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, seed1)
	r := cli(t, cliOptions{}, append(args, "--resume")...)
	if r.Code != 0 {
		t.Fatalf("resume: %s", tail(r.Stderr))
	}
	if d := diffSnapshots(before, snapshot(t, seed1)); len(d) > 0 {
		t.Errorf("resume changed the finished seed: %v", d)
	}
	if _, err := os.Stat(filepath.Join(out, "summary.json")); err != nil {
		t.Errorf("no mean summary after resume: %v", err)
	}
}
