package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMultiClientSitesEqualRun runs a five-client world job as a
// coordinator and two multi-client site processes (`site --clients 0-2` and
// `site --clients 3,4`, started with only --server, --certs, --clients,
// --data and --state: they receive the task from the coordinator) over
// mTLS and checks that the global tensors, the
// table and what every hosted client keeps equal those of `pfedmma run`,
// bit for bit, with the second process killed (SIGKILL) after round 1 and
// started again. Before the second process starts, a third one asking for
// clients 1-2, which the first already serves, is refused (one certificate,
// two sessions) and exits non-zero naming them, without disturbing the
// federation.
func TestMultiClientSitesEqualRun(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the multi-process federation test")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "pfedmma")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("pfedmma %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	sets := []string{"--set", "methods=[pfedmma]", "--set", "federation.clients=5", "--set", "federation.rounds=5"}
	names := []string{"s0", "s1", "s2", "s3", "s4"}
	run("certs", "init", "--dir", "certs", "--sites", strings.Join(names, ","))
	sim := run(append([]string{"run", "--quiet", "--out", "sim"}, sets...)...)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	start := func(args ...string) (*exec.Cmd, *bytes.Buffer) {
		var buf bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &buf, &buf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, &buf
	}
	wait := func(cmd *exec.Cmd, log *bytes.Buffer, what string, limit time.Duration) error {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			return err
		case <-time.After(limit):
			t.Fatalf("%s did not end within %v:\n%s", what, limit, log.String())
			return nil
		}
	}
	site := func(clients, state string) (*exec.Cmd, *bytes.Buffer) {
		return start("site", "--server", addr, "--certs", "certs", "--clients", clients, "--data", "world", "--state", state)
	}
	coord, coordLog := start(append([]string{"serve", "--listen", addr, "--certs", "certs", "--state", "coord"}, sets...)...)
	a, aLog := site("0-2", "hosts-a")
	deadline := time.Now().Add(90 * time.Second)
	for strings.Count(coordLog.String(), `msg="site registered"`) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the first site process did not register its three clients:\n%s\n%s", coordLog.String(), aLog.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// overlapping ranges: the second session of s1 and s2 is refused
	dup, dupLog := site("1-2", "hosts-dup")
	if err := wait(dup, dupLog, "the overlapping site process", 150*time.Second); err == nil {
		t.Fatalf("a site process asking for clients 1-2, served already, exited 0:\n%s", dupLog.String())
	}
	// its last line is the error: the refused site, then the stopped one
	// (which of s1 and s2 is refused first is up to the scheduler)
	last := strings.TrimSpace(dupLog.String())
	last = last[strings.LastIndex(last, "pfedmma: "):]
	for _, want := range []string{"--clients 1-2", "s1", "s2", "refused by the coordinator", "already connected from another process"} {
		if !strings.Contains(last, want) {
			t.Errorf("the overlapping site process's error does not say %q:\n%s", want, tail(dupLog.String()))
		}
	}
	b, bLog := site("3,4", "hosts-b")
	// SIGKILL the second process once round 1 is done, and start it again
	// with the same flags: its clients resume from their folders
	deadline = time.Now().Add(120 * time.Second)
	for !strings.Contains(coordLog.String(), "round=1 clients=5") {
		if time.Now().After(deadline) {
			t.Fatalf("the federation did not finish round 1:\n%s\n%s", coordLog.String(), bLog.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := b.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = b.Wait()
	b, bLog = site("3,4", "hosts-b")
	if err := wait(coord, coordLog, "the coordinator", 180*time.Second); err != nil {
		t.Fatalf("coordinator: %v\n%s", err, coordLog.String())
	}
	for i, s := range []*exec.Cmd{a, b} {
		log := []*bytes.Buffer{aLog, bLog}[i]
		if err := wait(s, log, "a site process", 30*time.Second); err != nil {
			t.Errorf("site process %d: %v\n%s", i, err, log.String())
		}
	}
	if !strings.Contains(bLog.String(), `msg="fit done"`) {
		t.Errorf("the restarted second process trained no round (killed too late?):\n%s", bLog.String())
	}
	if n := strings.Count(coordLog.String(), "refused: a second process"); n == 0 {
		t.Errorf("the coordinator logged no refused second session:\n%s", coordLog.String())
	}
	want, got := readTensors(t, filepath.Join(dir, "sim/global/pfedmma.safetensors")), readTensors(t, filepath.Join(dir, "coord/out/global/pfedmma.safetensors"))
	if len(want) == 0 || len(want) != len(got) {
		t.Fatalf("global tensors: %d in the simulation, %d from the federation", len(want), len(got))
	}
	for k, w := range want {
		if !bytes.Equal(w, got[k]) {
			t.Errorf("global %s differs between run and serve + multi-client sites", k)
		}
	}
	table := func(s string) string { return s[strings.Index(s, "Method"):strings.Index(s, "results")] }
	if table(sim) != table(coordLog.String()[strings.LastIndex(coordLog.String(), "world —"):]) {
		t.Errorf("tables differ:\nrun:\n%s\nserve:\n%s", sim, coordLog.String())
	}
	for i, s := range names {
		host := "hosts-a"
		if i >= 3 {
			host = "hosts-b"
		}
		path := filepath.Join(dir, host, "site-"+s, "sites", "pfedmma", fmt.Sprintf("client_%03d.safetensors", i))
		want, got := readTensors(t, filepath.Join(dir, fmt.Sprintf("sim/sites/pfedmma/client_%03d.safetensors", i))), readTensors(t, path)
		if len(want) == 0 || len(want) != len(got) {
			t.Errorf("client %d keeps %d tensors, the simulation's %d", i, len(got), len(want))
		}
		for k, w := range want {
			if !bytes.Equal(w, got[k]) {
				t.Errorf("client %d keeps another %s than the simulation's", i, k)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, host, "site-"+s, "task.yaml")); err != nil {
			t.Errorf("client %d did not keep the task it received: %v", i, err)
		}
		if m, err := os.ReadFile(filepath.Join(dir, host, "site-"+s, "metrics.jsonl")); err != nil || !bytes.Contains(m, []byte(`"round"`)) {
			t.Errorf("client %d wrote no metrics in its folder: %v %q", i, err, m)
		}
	}
}

// TestSiteClientsRefused: a malformed --clients, one beyond
// federation.clients or beyond the certificates, and --clients with --name
// are refused before anything connects, naming the flag.
func TestSiteClientsRefused(t *testing.T) {
	dir := t.TempDir()
	certsDir := filepath.Join(dir, "certs")
	if _, err := execute(t, "certs", "init", "--dir", certsDir, "--sites", "a,b,c"); err != nil {
		t.Fatal(err)
	}
	base := []string{"site", "--server", "127.0.0.1:1", "--certs", certsDir, "--data", "world", "--state", filepath.Join(dir, "st"), "--set", "federation.clients=3"}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--clients", "2-1"}, []string{"--clients", "2-1", "backwards"}},
		{[]string{"--clients", "0,x"}, []string{"--clients", `"x" is not a client number`}},
		{[]string{"--clients", "0-3"}, []string{"--clients 0-3", "client 3", "federation.clients=3"}},
		{[]string{"--clients", "0-3", "--set", "federation.clients=4"}, []string{"--clients 0-3", "client 3 has no site", "sites.txt names 3 sites"}},
		{[]string{"--clients", "0-1", "--name", "a"}, []string{"--name and --clients exclude each other"}},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := execute(t, append(append([]string(nil), base...), c.args...)...)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("site %s was accepted", strings.Join(c.args, " "))
				continue
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("site %s: %v; want it to say %q", strings.Join(c.args, " "), err, w)
				}
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("site %s was not refused (it went on to connect)", strings.Join(c.args, " "))
		}
	}
}
