package transport

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/tensor"
)

var (
	nodeOnce sync.Once
	nodeBin  string
	nodeErr  error
)

// testnode builds transport/internal/testnode once per test binary.
func testnode(t *testing.T) string {
	t.Helper()
	nodeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "testnode")
		if err != nil {
			nodeErr = err
			return
		}
		nodeBin = filepath.Join(dir, "testnode")
		out, err := exec.Command("go", "build", "-o", nodeBin, "./internal/testnode").CombinedOutput()
		if err != nil {
			nodeErr = fmt.Errorf("go build testnode: %v\n%s", err, out)
		}
	})
	if nodeErr != nil {
		t.Fatal(nodeErr)
	}
	return nodeBin
}

// proc is a running testnode whose output lines are watched.
type proc struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	out   bytes.Buffer
	lines chan string
	done  chan struct{}
	err   error
}

func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), lines: make(chan string, 4096), done: make(chan struct{})}
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
	}()
	go func() {
		p.err = p.cmd.Wait()
		pw.Close()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *proc) kill() {
	if p.cmd.Process != nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// waitLine waits for an output line holding every one of subs.
func (p *proc) waitLine(t *testing.T, d time.Duration, subs ...string) {
	t.Helper()
	tm := time.After(d)
	for {
		select {
		case l := <-p.lines:
			ok := true
			for _, s := range subs {
				ok = ok && strings.Contains(l, s)
			}
			if ok {
				return
			}
		case <-p.done:
			t.Fatalf("process ended before a line with %q:\n%s", subs, p.output())
		case <-tm:
			t.Fatalf("no line with %q in %v:\n%s", subs, d, p.output())
		}
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func final(t *testing.T, p *proc) tensor.Named {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(40 * time.Second):
		t.Fatalf("coordinator did not finish:\n%s", p.output())
	}
	if p.err != nil {
		t.Fatalf("coordinator: %v\n%s", p.err, p.output())
	}
	for _, l := range strings.Split(p.output(), "\n") {
		if js, ok := strings.CutPrefix(l, "FINAL "); ok {
			var n tensor.Named
			if err := json.Unmarshal([]byte(js), &n); err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no FINAL line:\n%s", p.output())
	return nil
}

// TestKillNine runs a coordinator and three sites as processes over mTLS
// on loopback, kills -9 the coordinator (then a site) mid-run, restarts it
// with the same flags, and checks that the final global tensors equal an
// uninterrupted in-process run bit for bit.
func TestKillNine(t *testing.T) {
	t.Parallel() // processes that wait on each other and the network, not the CPU
	if testing.Short() {
		t.Skip("builds and runs processes; skipped with -short")
	}
	bin := testnode(t)
	const n, rounds, seed = 3, 6, 7
	want, _ := reference(t, n, rounds, 1, seed)
	for _, victim := range []string{"coordinator", "site-1"} {
		t.Run(victim, func(t *testing.T) {
			t.Parallel() // each victim has its own folder and port
			dir := t.TempDir()
			var sites []string
			for i := range n {
				sites = append(sites, fmt.Sprintf("site-%d", i))
			}
			if err := certs.Init(dir, sites, nil); err != nil {
				t.Fatal(err)
			}
			addr := freePort(t)
			coordArgs := []string{"-role", "coord", "-certs", dir, "-state", filepath.Join(dir, "coord.db"), "-addr", addr,
				"-rounds", fmt.Sprint(rounds), "-seed", fmt.Sprint(seed)}
			siteArgs := func(i int) []string {
				return []string{"-role", "site", "-certs", dir, "-site", sites[i], "-addr", addr,
					"-state", filepath.Join(dir, "state", sites[i]), "-delay", "150ms"}
			}
			coord := start(t, bin, coordArgs...)
			coord.waitLine(t, 10*time.Second, "coordinator listening")
			procs := make([]*proc, n)
			for i := range n {
				procs[i] = start(t, bin, siteArgs(i)...)
			}
			if victim == "coordinator" {
				coord.waitLine(t, 20*time.Second, `msg="round done"`, "round=2")
				time.Sleep(100 * time.Millisecond) // into round 3
				coord.kill()
				coord = start(t, bin, coordArgs...)
				coord.waitLine(t, 10*time.Second, "resuming", "next_round=3")
			} else {
				coord.waitLine(t, 20*time.Second, `msg="round done"`, "round=1")
				time.Sleep(200 * time.Millisecond) // site-1 is training round 2
				procs[1].kill()
				time.Sleep(300 * time.Millisecond)
				procs[1] = start(t, bin, siteArgs(1)...)
			}
			got := final(t, coord)
			sameNamed(t, got, want)
			for i, p := range procs {
				select {
				case <-p.done:
					if p.err != nil {
						t.Errorf("site %d: %v", i, p.err)
					}
				case <-time.After(10 * time.Second):
					t.Errorf("site %d did not stop after the federation", i)
				}
			}
		})
	}
}

// TestSiteVanishes kills -9 one site of three mid-run: its rounds close
// with the other two (once it is offline, without waiting for the
// deadline), and once restarted it catches up from the current round and
// contributes again.
func TestSiteVanishes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs processes; skipped with -short")
	}
	bin := testnode(t)
	dir := t.TempDir()
	sites := []string{"site-0", "site-1", "site-2"}
	if err := certs.Init(dir, sites, nil); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	coord := start(t, bin, "-role", "coord", "-certs", dir, "-state", filepath.Join(dir, "coord.db"), "-addr", addr,
		"-rounds", "40", "-round-timeout", "800ms")
	coord.waitLine(t, 10*time.Second, "coordinator listening")
	siteArgs := func(i int) []string {
		return []string{"-role", "site", "-certs", dir, "-site", sites[i], "-addr", addr,
			"-state", filepath.Join(dir, "state", sites[i]), "-delay", "100ms"}
	}
	procs := []*proc{start(t, bin, siteArgs(0)...), start(t, bin, siteArgs(1)...), start(t, bin, siteArgs(2)...)}
	coord.waitLine(t, 20*time.Second, `msg="round done"`, "round=1")
	procs[2].kill()
	coord.waitLine(t, 20*time.Second, `msg="client failed"`, "client=2")
	coord.waitLine(t, 20*time.Second, `msg="round done"`, "failures=1")
	procs[2] = start(t, bin, siteArgs(2)...)
	coord.waitLine(t, 20*time.Second, `msg="update accepted"`, "site=site-2")
	final(t, coord)
	out := coord.output()
	if !strings.Contains(out, "round=39") || strings.Count(out, `msg="round done"`) != 40 {
		t.Fatalf("not every round completed:\n%s", out)
	}
}
