package main

// Process tests of issue 21 (operating a federation): `pfedmma serve` and
// `pfedmma site` run as real OS processes over mTLS on 127.0.0.1, on the
// tiny world job, and are killed, revoked, misconfigured or left out.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	opsBinOnce sync.Once
	opsBinPath string
	opsBinErr  error
)

// opsBinary builds the pfedmma binary once per test binary.
func opsBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping the multi-process federation test")
	}
	opsBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pfedmma-ops")
		if err != nil {
			opsBinErr = err
			return
		}
		opsBinPath = filepath.Join(dir, "pfedmma")
		if out, err := exec.Command("go", "build", "-o", opsBinPath, ".").CombinedOutput(); err != nil {
			opsBinErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if opsBinErr != nil {
		t.Fatal(opsBinErr)
	}
	return opsBinPath
}

// opsProc is a running pfedmma process whose output is kept.
type opsProc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

func (p *opsProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *opsProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// waitLine waits until a line of the output holds every one of subs.
func (p *opsProc) waitLine(t *testing.T, d time.Duration, subs ...string) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		sc := bufio.NewScanner(strings.NewReader(p.output()))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			ok := true
			for _, s := range subs {
				ok = ok && strings.Contains(sc.Text(), s)
			}
			if ok {
				return sc.Text()
			}
		}
		select {
		case <-p.done:
			t.Fatalf("%s ended (%v) before a line with %q:\n%s", p.name, p.err, subs, tail(p.output()))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no line with %q in %v:\n%s", p.name, subs, d, tail(p.output()))
		}
	}
}

// exit waits for the process to end and returns its exit code.
func (p *opsProc) exit(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("%s still running after %v:\n%s", p.name, d, tail(p.output()))
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *opsProc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *opsProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// opsFed is a federation folder: certificates for site-a, site-b and
// site-c, and the settings every process shares.
type opsFed struct {
	t         *testing.T
	bin, dir  string
	addr      string
	sets      []string
	coordOut  string
	stateRoot string
}

var opsSites = []string{"site-a", "site-b", "site-c"}

func newOpsFed(t *testing.T, rounds int) *opsFed {
	t.Helper()
	f := &opsFed{t: t, bin: opsBinary(t), dir: t.TempDir()}
	f.sets = []string{"--set", "methods=[pfedmma]", "--set", "federation.clients=3", "--set", fmt.Sprintf("federation.rounds=%d", rounds),
		"--set", "dataset.num_classes=8", "--set", "pfedmma.dim=8"}
	if out, err := f.cmd("certs", "init", "--dir", "certs", "--sites", strings.Join(opsSites, ",")).CombinedOutput(); err != nil {
		t.Fatalf("certs init: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = l.Addr().String()
	l.Close()
	f.coordOut = filepath.Join(f.dir, "coord", "out")
	return f
}

func (f *opsFed) cmd(args ...string) *exec.Cmd {
	c := exec.Command(f.bin, args...)
	c.Dir = f.dir
	return c
}

func (f *opsFed) start(name string, args ...string) *opsProc {
	f.t.Helper()
	p := &opsProc{name: name, cmd: f.cmd(args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	f.t.Cleanup(p.kill)
	return p
}

// serve starts the coordinator with the shared settings and args.
func (f *opsFed) serve(args ...string) *opsProc {
	all := append([]string{"serve", "--listen", f.addr, "--certs", "certs", "--state", "coord"}, args...)
	return f.start("serve", append(all, f.sets...)...)
}

// site starts site name (state in site-NAME) with the shared settings,
// then extra.
func (f *opsFed) site(name string, extra ...string) *opsProc {
	all := append([]string{"site", "--server", f.addr, "--certs", "certs", "--name", name, "--data", "world"}, f.sets...)
	return f.start(name, append(all, extra...)...)
}

// opsRound is one line of a run's metrics.jsonl.
type opsRound struct {
	Round        int   `json:"round"`
	Participants []int `json:"participants"`
	Absent       []int `json:"absent"`
}

func readRounds(t *testing.T, runDir string) []opsRound {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(runDir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []opsRound
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r opsRound
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("metrics.jsonl line %q: %v", l, err)
		}
		out = append(out, r)
	}
	return out
}

func readFileString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// expectExit fails unless p ends with code want (0) or any non-zero code
// (want < 0) within d.
func expectExit(t *testing.T, p *opsProc, d time.Duration, want int) {
	t.Helper()
	code := p.exit(t, d)
	if (want >= 0 && code != want) || (want < 0 && code == 0) {
		t.Fatalf("%s exited %d, want %s:\n%s", p.name, code, map[bool]string{true: "non-zero", false: fmt.Sprint(want)}[want < 0], tail(p.output()))
	}
}

// TestOperateDeadSite: a site killed with SIGKILL after the first round,
// with no round deadline and with a long one: once it is offline
// (--offline-after) the rounds go on without it instead of waiting for it
// (forever, or for the deadline every round), serve ends 0, and
// metrics.jsonl and report.md name it absent.
func TestOperateDeadSite(t *testing.T) {
	for _, c := range []struct{ name, timeout string }{{"no-deadline", "0"}, {"deadline", "60s"}} {
		t.Run(c.name, func(t *testing.T) {
			f := newOpsFed(t, 8)
			serve := f.serve("--round-timeout", c.timeout, "--offline-after", "1500ms")
			sites := []*opsProc{f.site("site-a"), f.site("site-b"), f.site("site-c")}
			serve.waitLine(t, 60*time.Second, `msg="round done"`, "round=0")
			sites[2].kill()
			t0 := time.Now()
			expectExit(t, serve, 60*time.Second, 0)
			if d := time.Since(t0); d > 40*time.Second {
				t.Errorf("the rounds after the kill took %v", d)
			}
			expectExit(t, sites[0], 20*time.Second, 0)
			expectExit(t, sites[1], 20*time.Second, 0)
			serve.waitLine(t, time.Second, "site went offline", "site=site-c")
			rounds := readRounds(t, f.coordOut)
			if len(rounds) != 8 {
				t.Fatalf("metrics.jsonl holds %d rounds, want 8", len(rounds))
			}
			last := rounds[len(rounds)-1]
			if !slices.Equal(last.Absent, []int{2}) || !slices.Equal(last.Participants, []int{0, 1}) {
				t.Fatalf("last round: participants %v, absent %v; want [0 1] and [2]", last.Participants, last.Absent)
			}
			rep := readFileString(t, filepath.Join(f.coordOut, "report.md"))
			if !strings.Contains(rep, "Absent sites") || !strings.Contains(rep, fmt.Sprintf("round %d: client(s) 2 did not answer", last.Round)) {
				t.Fatalf("report.md does not name the absent site:\n%s", rep)
			}
		})
	}
}

// TestOperateSiteNeverRegisters: with --register-timeout the run starts
// with the two sites that came, logs the missing one by name, and every
// round names it absent.
func TestOperateSiteNeverRegisters(t *testing.T) {
	f := newOpsFed(t, 3)
	serve := f.serve("--register-timeout", "2s", "--min-fit", "2", "--offline-after", "1500ms")
	a, b := f.site("site-a"), f.site("site-b")
	serve.waitLine(t, 30*time.Second, "registration deadline passed", "site-c")
	expectExit(t, serve, 60*time.Second, 0)
	expectExit(t, a, 20*time.Second, 0)
	expectExit(t, b, 20*time.Second, 0)
	for _, r := range readRounds(t, f.coordOut) {
		if !slices.Equal(r.Absent, []int{2}) || !slices.Equal(r.Participants, []int{0, 1}) {
			t.Fatalf("round %d: participants %v, absent %v; want [0 1] and [2]", r.Round, r.Participants, r.Absent)
		}
	}
	if rep := readFileString(t, filepath.Join(f.coordOut, "report.md")); !strings.Contains(rep, "client(s) 2 did not answer") {
		t.Fatalf("report.md does not name the absent site:\n%s", rep)
	}
}

// TestOperateMinFitWaitsAndResumes: with --min-fit 3 a round that lost a
// site waits (logging the missing site) instead of ending the run, and
// once the site is started again from its state folder the run finishes
// with every round aggregating all three.
func TestOperateMinFitWaitsAndResumes(t *testing.T) {
	f := newOpsFed(t, 5)
	serve := f.serve("--min-fit", "3", "--offline-after", "1500ms")
	sites := []*opsProc{f.site("site-a"), f.site("site-b"), f.site("site-c")}
	serve.waitLine(t, 60*time.Second, `msg="round done"`, "round=0")
	sites[2].kill()
	serve.waitLine(t, 30*time.Second, "round below --min-fit", "site-c")
	time.Sleep(2 * time.Second)
	if !serve.running() {
		t.Fatalf("serve ended with a site down:\n%s", tail(serve.output()))
	}
	sites[2] = f.site("site-c")
	expectExit(t, serve, 60*time.Second, 0)
	for _, s := range sites {
		expectExit(t, s, 20*time.Second, 0)
	}
	rounds := readRounds(t, f.coordOut)
	if len(rounds) != 5 {
		t.Fatalf("metrics.jsonl holds %d rounds, want 5", len(rounds))
	}
	for _, r := range rounds {
		if !slices.Equal(r.Participants, []int{0, 1, 2}) || len(r.Absent) != 0 {
			t.Fatalf("round %d: participants %v, absent %v; want all three", r.Round, r.Participants, r.Absent)
		}
	}
}

// TestOperateConfigMismatch: a site started with another setting is
// refused at registration: it exits non-zero naming the key and both
// values, and the coordinator logs the refusal with the key.
func TestOperateConfigMismatch(t *testing.T) {
	f := newOpsFed(t, 2)
	serve := f.serve()
	site := f.site("site-c", "--set", "federation.local_epochs=7")
	expectExit(t, site, 60*time.Second, -1)
	if out := site.output(); !strings.Contains(out, "federation.local_epochs: coordinator ") || !strings.Contains(out, "site 7") {
		t.Fatalf("the site's message does not name federation.local_epochs and both values:\n%s", tail(out))
	}
	serve.waitLine(t, 5*time.Second, "refused: site's configuration differs", "site=site-c", "federation.local_epochs")
	if !serve.running() {
		t.Fatalf("serve ended:\n%s", tail(serve.output()))
	}
}

// TestOperateRevokedSiteCutOff: `pfedmma certs revoke` of a site that is
// connected and training: the site ends non-zero with a message saying it
// was revoked, the run finishes without it, and once a round is without
// it no later round aggregates it.
func TestOperateRevokedSiteCutOff(t *testing.T) {
	const rounds = 16
	f := newOpsFed(t, rounds)
	f.sets = append(f.sets, "--set", "federation.local_epochs=4")
	serve := f.serve("--offline-after", "3s")
	sites := []*opsProc{f.site("site-a"), f.site("site-b"), f.site("site-c")}
	serve.waitLine(t, 60*time.Second, `msg="round done"`, "round=1")
	if out, err := f.cmd("certs", "revoke", "--dir", "certs", "site-b").CombinedOutput(); err != nil {
		t.Fatalf("certs revoke: %v\n%s", err, out)
	}
	expectExit(t, sites[1], 15*time.Second, -1)
	if out := sites[1].output(); !strings.Contains(out, "revoked") {
		t.Fatalf("the revoked site's message does not say it was revoked:\n%s", tail(out))
	}
	expectExit(t, serve, 90*time.Second, 0)
	expectExit(t, sites[0], 20*time.Second, 0)
	expectExit(t, sites[2], 20*time.Second, 0)
	serve.waitLine(t, time.Second, "site revoked: cut off", "site=site-b")
	cut := -1
	for _, r := range readRounds(t, f.coordOut) {
		if !slices.Contains(r.Participants, 1) {
			if cut < 0 {
				cut = r.Round
			}
			continue
		}
		if cut >= 0 {
			t.Fatalf("round %d aggregated site-b after round %d went without it", r.Round, cut)
		}
	}
	if cut < 0 || cut > rounds-3 {
		t.Fatalf("site-b was cut off from round %d of %d", cut, rounds)
	}
}
