package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	t.Parallel() // its processes wait (rounds, retries) more than they compute
	d := newProcDir(t)
	dir, run := d.dir, d.run
	sets := []string{"--set", "methods=[pfedmma]", "--set", "federation.clients=5", "--set", "federation.rounds=5"}
	names := []string{"s0", "s1", "s2", "s3", "s4"}
	run("certs", "init", "--dir", "certs", "--sites", strings.Join(names, ","))
	sim := run(append([]string{"run", "--quiet", "--out", "sim"}, sets...)...)

	addr := freeAddr(t)
	site := func(clients, state string) *opsProc {
		return d.start("site --clients "+clients, "site", "--server", addr, "--certs", "certs", "--clients", clients, "--data", "world", "--state", state)
	}
	coord := d.start("serve", append([]string{"serve", "--listen", addr, "--certs", "certs", "--state", "coord"}, sets...)...)
	a := site("0-2", "hosts-a")
	deadline := time.Now().Add(90 * time.Second)
	for strings.Count(coord.output(), `msg="site registered"`) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the first site process did not register its three clients:\n%s\n%s", tail(coord.output()), tail(a.output()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// overlapping ranges: the second session of s1 and s2 is refused
	dup := d.start("site --clients 1-2", "site", "--server", addr, "--certs", "certs", "--clients", "1-2", "--data", "world", "--state", "hosts-dup", "--duplicate-grace", "3s")
	expectExit(t, dup, 150*time.Second, -1)
	// its last line is the error: the refused site, then the stopped one
	// (which of s1 and s2 is refused first is up to the scheduler)
	last := strings.TrimSpace(dup.output())
	last = last[strings.LastIndex(last, "pfedmma: "):]
	for _, want := range []string{"--clients 1-2", "s1", "s2", "refused by the coordinator", "already connected from another process"} {
		if !strings.Contains(last, want) {
			t.Errorf("the overlapping site process's error does not say %q:\n%s", want, tail(dup.output()))
		}
	}
	b := site("3,4", "hosts-b")
	// SIGKILL the second process once round 1 is done, and start it again
	// with the same flags: its clients resume from their folders
	coord.waitLine(t, 120*time.Second, "round=1 clients=5")
	b.kill()
	b = site("3,4", "hosts-b")
	expectExit(t, coord, 180*time.Second, 0)
	for _, s := range []*opsProc{a, b} {
		expectExit(t, s, 30*time.Second, 0)
	}
	if !strings.Contains(b.output(), `msg="fit done"`) {
		t.Errorf("the restarted second process trained no round (killed too late?):\n%s", tail(b.output()))
	}
	if n := strings.Count(coord.output(), "refused: a second process"); n == 0 {
		t.Errorf("the coordinator logged no refused second session:\n%s", tail(coord.output()))
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
	if log := coord.output(); table(sim) != table(log[strings.LastIndex(log, "world —"):]) {
		t.Errorf("tables differ:\nrun:\n%s\nserve:\n%s", sim, log)
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
