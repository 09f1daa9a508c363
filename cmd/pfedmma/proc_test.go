package main

// What the process tests share (serve + sites, SIGTERM, bad files, ...):
// the pfedmma binary, built once per test binary; a folder the processes
// run in; free loopback addresses; and running processes whose output is
// kept.

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// TestMain removes the binary the process tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// testBinary builds the pfedmma binary once per test binary (every process
// test runs the same one); under -short it skips the test.
func testBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping the test that runs the pfedmma binary")
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "pfedmma-bin")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "pfedmma")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// freeAddr is a 127.0.0.1 address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// procDir is a folder (a fresh temporary one) in which pfedmma processes
// run: relative paths in their arguments are relative to it.
type procDir struct {
	t        *testing.T
	bin, dir string
}

func newProcDir(t *testing.T) *procDir {
	t.Helper()
	return &procDir{t: t, bin: testBinary(t), dir: t.TempDir()}
}

// sub is d for subtest t: the same folder, t's failures and cleanups.
func (d *procDir) sub(t *testing.T) *procDir { return &procDir{t: t, bin: d.bin, dir: d.dir} }

func (d *procDir) cmd(args ...string) *exec.Cmd {
	c := exec.Command(d.bin, args...)
	c.Dir = d.dir
	return c
}

// run runs pfedmma with args to its end and returns its output; a
// non-zero exit fails the test.
func (d *procDir) run(args ...string) string {
	d.t.Helper()
	out, err := d.cmd(args...).CombinedOutput()
	if err != nil {
		d.t.Fatalf("pfedmma %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// stdout runs pfedmma with args to its end and returns what it printed on
// standard output, its result (standard error holds its log, whose lines
// carry times); a non-zero exit fails the test.
func (d *procDir) stdout(args ...string) string {
	d.t.Helper()
	c := d.cmd(args...)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		d.t.Fatalf("pfedmma %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}

// start starts pfedmma with args, keeping its output; it is killed when
// the test ends.
func (d *procDir) start(name string, args ...string) *opsProc {
	d.t.Helper()
	p := &opsProc{name: name, cmd: d.cmd(args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	d.t.Cleanup(p.kill)
	return p
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

// expectExit fails unless p ends with code want (0) or any non-zero code
// (want < 0) within d.
func expectExit(t *testing.T, p *opsProc, d time.Duration, want int) {
	t.Helper()
	code := p.exit(t, d)
	if (want >= 0 && code != want) || (want < 0 && code == 0) {
		t.Fatalf("%s exited %d, want %s:\n%s", p.name, code, map[bool]string{true: "non-zero", false: fmt.Sprint(want)}[want < 0], tail(p.output()))
	}
}
