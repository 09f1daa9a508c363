package main

import (
	"bytes"
	"fmt"
	"image/png"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/world"
)

// TestServeSitesEqualRun runs the default world job as a real federation —
// a coordinator and three site processes over mTLS on 127.0.0.1, the sites
// started with only --server, --certs, --name and --data world (they
// receive the experiment from the coordinator) — kills the
// coordinator with SIGKILL after its second round, restarts it with the
// same flags, then kills a site with SIGKILL after the third and restarts
// it, and checks that the global tensors, the table and what every site
// keeps equal those of `pfedmma run` with the same configuration, bit for
// bit.
func TestServeSitesEqualRun(t *testing.T) {
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
	sets := []string{"--set", "methods=[pfedmma]", "--set", "federation.clients=3", "--set", "federation.rounds=4"}
	run("certs", "init", "--dir", "certs", "--sites", "site-a,site-b,site-c")
	sim := run(append([]string{"run", "--quiet", "--out", "sim"}, sets...)...)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	start := func(name string, args ...string) (*exec.Cmd, *bytes.Buffer) {
		var buf bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &buf, &buf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, &buf
	}
	serveArgs := append([]string{"serve", "--listen", addr, "--certs", "certs", "--state", "coord"}, sets...)
	coord, coordLog := start("serve", serveArgs...)
	var sites []*exec.Cmd
	for _, s := range []string{"site-a", "site-b", "site-c"} {
		c, _ := start(s, "site", "--server", addr, "--certs", "certs", "--name", s, "--data", "world")
		sites = append(sites, c)
	}
	deadline := time.Now().Add(90 * time.Second)
	for !strings.Contains(coordLog.String(), "round=1 clients=3") {
		if time.Now().After(deadline) {
			t.Fatalf("the coordinator did not finish round 1:\n%s", coordLog.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := coord.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = coord.Wait()
	coord, coordLog = start("serve", serveArgs...)
	// then SIGKILL site-b once the restarted coordinator is past round 2,
	// and start it again from its state folder
	deadline = time.Now().Add(90 * time.Second)
	for !strings.Contains(coordLog.String(), "round=2 clients=") {
		if time.Now().After(deadline) {
			t.Fatalf("the restarted coordinator did not finish round 2:\n%s", coordLog.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := sites[1].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = sites[1].Wait()
	sites[1], _ = start("site-b", "site", "--server", addr, "--certs", "certs", "--name", "site-b", "--data", "world")
	done := make(chan error, 1)
	go func() { done <- coord.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("restarted coordinator: %v\n%s", err, coordLog.String())
		}
	case <-time.After(120 * time.Second):
		t.Fatalf("the restarted coordinator did not finish:\n%s", coordLog.String())
	}
	if !strings.Contains(coordLog.String(), "resum") {
		t.Errorf("the restarted coordinator did not resume:\n%s", coordLog.String())
	}
	for i, s := range sites {
		if err := s.Wait(); err != nil {
			t.Errorf("site %d: %v", i, err)
		}
	}
	want, got := readTensors(t, filepath.Join(dir, "sim/global/pfedmma.safetensors")), readTensors(t, filepath.Join(dir, "coord/out/global/pfedmma.safetensors"))
	if len(want) == 0 || len(want) != len(got) {
		t.Fatalf("global tensors: %d in the simulation, %d from the federation", len(want), len(got))
	}
	for k, w := range want {
		if !bytes.Equal(w, got[k]) {
			t.Errorf("global %s differs between run and serve + sites", k)
		}
	}
	// serve's output folder is a run folder: `pfedmma report` reads it
	if out := run("report", "coord/out", "--out", "rep"); !strings.Contains(out, "pfedmma") {
		t.Errorf("report on serve's output: %s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "coord/out/run.json")); err != nil {
		t.Errorf("serve wrote no run.json: %v", err)
	}
	table := func(s string) string { return s[strings.Index(s, "Method"):strings.Index(s, "results")] }
	if table(sim) != table(coordLog.String()[strings.LastIndex(coordLog.String(), "world —"):]) {
		t.Errorf("tables differ:\nrun:\n%s\nserve:\n%s", sim, coordLog.String())
	}
	for i, s := range []string{"site-a", "site-b", "site-c"} {
		path := filepath.Join(dir, "site-"+s, "sites", "pfedmma", fmt.Sprintf("client_%03d.safetensors", i))
		if _, err := os.Stat(path); err != nil {
			t.Errorf("site %s kept no parameters: %v", s, err)
			continue
		}
		// what each site keeps (for predict) is the simulation's
		want, got := readTensors(t, filepath.Join(dir, fmt.Sprintf("sim/sites/pfedmma/client_%03d.safetensors", i))), readTensors(t, path)
		if len(want) == 0 || len(want) != len(got) {
			t.Errorf("site %s keeps %d tensors, the simulation %d", s, len(got), len(want))
		}
		for k, w := range want {
			if !bytes.Equal(w, got[k]) {
				t.Errorf("site %s keeps another %s than the simulation's site", s, k)
			}
		}
		// the README's recipe: copy the site's files into serve's output
		// folder, and predict works there as on the simulated run
		dst := filepath.Join(dir, "coord/out/sites/pfedmma", filepath.Base(path))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, _ := world.New(world.DefaultConfig())
	img, err := w.Render(world.Spec{Split: world.TestSplit, Class: w.Classes()[0], Domain: world.Photo}, 48)
	if err != nil {
		t.Fatal(err)
	}
	imgPath := filepath.Join(dir, "x.png")
	f, err := os.Create(imgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for i, s := range []string{"site-a", "site-b", "site-c"} {
		task, err := os.ReadFile(filepath.Join(dir, "site-"+s, "task.yaml"))
		if err != nil || !strings.Contains(string(task), "rounds: 4") {
			t.Errorf("site %d kept no task.yaml with the coordinator's rounds: %v\n%s", i, err, task)
		}
	}
	// clear text for local development, and a scripted setup: the sites
	// named with --sites instead of a certificates folder, started with
	// the coordinator's experiment flags (checked, equal), the same result
	serve2, serve2Log := start("serve", append([]string{"serve", "--listen", addr, "--insecure-dev", "--sites", "site-a,site-b,site-c", "--state", "coord-dev", "--quiet"}, sets...)...)
	for _, s := range []string{"site-a", "site-b", "site-c"} {
		start(s, append([]string{"site", "--server", addr, "--insecure-dev", "--sites", "site-a,site-b,site-c", "--name", s, "--data", "world", "--state", "dev-" + s}, sets...)...)
	}
	done2 := make(chan error, 1)
	go func() { done2 <- serve2.Wait() }()
	select {
	case err := <-done2:
		if err != nil {
			t.Fatalf("serve --insecure-dev --sites: %v\n%s", err, serve2Log.String())
		}
	case <-time.After(120 * time.Second):
		t.Fatalf("serve --insecure-dev --sites did not finish:\n%s", serve2Log.String())
	}
	if strings.Contains(serve2Log.String(), "level=INFO") || !strings.Contains(serve2Log.String(), "results in") {
		t.Errorf("serve --quiet logged progress or no results:\n%s", serve2Log.String())
	}
	dev := readTensors(t, filepath.Join(dir, "coord-dev/out/global/pfedmma.safetensors"))
	for k, w := range want {
		if !bytes.Equal(w, dev[k]) {
			t.Errorf("global %s differs between run and serve --insecure-dev --sites", k)
		}
	}
	for client := range 3 {
		c := fmt.Sprint(client)
		wantOut := run("predict", "--run", "sim", "--client", c, "--image", imgPath, "--top", "5")
		gotOut := run("predict", "--run", "coord/out", "--client", c, "--image", imgPath, "--top", "5")
		if !strings.Contains(wantOut, "%") || gotOut != wantOut {
			t.Errorf("predict client %s on serve's output folder:\n%s\non the simulated run:\n%s", c, gotOut, wantOut)
		}
	}
}

// readTensors returns each tensor's raw bytes.
func readTensors(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	for _, n := range f.Names() {
		x, err := f.Float32(n)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = []byte(fmt.Sprint(x.Data))
	}
	return out
}
