package main

import (
	"bytes"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
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
	t.Parallel() // its processes wait (rounds, retries) more than they compute
	d := newProcDir(t)
	dir, run := d.dir, d.run
	sets := []string{"--set", "methods=[pfedmma]", "--set", "federation.clients=3", "--set", "federation.rounds=4"}
	run("certs", "init", "--dir", "certs", "--sites", "site-a,site-b,site-c")
	sim := run(append([]string{"run", "--quiet", "--out", "sim"}, sets...)...)

	addr := freeAddr(t)
	serveArgs := append([]string{"serve", "--listen", addr, "--certs", "certs", "--state", "coord"}, sets...)
	coord := d.start("serve", serveArgs...)
	var sites []*opsProc
	for _, s := range []string{"site-a", "site-b", "site-c"} {
		sites = append(sites, d.start(s, "site", "--server", addr, "--certs", "certs", "--name", s, "--data", "world"))
	}
	coord.waitLine(t, 90*time.Second, "round=1 clients=3")
	coord.kill()
	coord = d.start("serve", serveArgs...)
	// then SIGKILL site-b once the restarted coordinator is past round 2,
	// and start it again from its state folder
	coord.waitLine(t, 90*time.Second, "round=2 clients=")
	sites[1].kill()
	sites[1] = d.start("site-b", "site", "--server", addr, "--certs", "certs", "--name", "site-b", "--data", "world")
	expectExit(t, coord, 120*time.Second, 0)
	if !strings.Contains(coord.output(), "resum") {
		t.Errorf("the restarted coordinator did not resume:\n%s", tail(coord.output()))
	}
	for _, s := range sites {
		expectExit(t, s, 60*time.Second, 0)
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
	if log := coord.output(); table(sim) != table(log[strings.LastIndex(log, "world —"):]) {
		t.Errorf("tables differ:\nrun:\n%s\nserve:\n%s", sim, log)
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
	serve2 := d.start("serve", append([]string{"serve", "--listen", addr, "--insecure-dev", "--sites", "site-a,site-b,site-c", "--state", "coord-dev", "--quiet"}, sets...)...)
	for _, s := range []string{"site-a", "site-b", "site-c"} {
		d.start(s, append([]string{"site", "--server", addr, "--insecure-dev", "--sites", "site-a,site-b,site-c", "--name", s, "--data", "world", "--state", "dev-" + s}, sets...)...)
	}
	expectExit(t, serve2, 120*time.Second, 0)
	if log := serve2.output(); strings.Contains(log, "level=INFO") || !strings.Contains(log, "results in") {
		t.Errorf("serve --quiet logged progress or no results:\n%s", log)
	}
	dev := readTensors(t, filepath.Join(dir, "coord-dev/out/global/pfedmma.safetensors"))
	for k, w := range want {
		if !bytes.Equal(w, dev[k]) {
			t.Errorf("global %s differs between run and serve --insecure-dev --sites", k)
		}
	}
	for client := range 3 {
		c := fmt.Sprint(client)
		// the predictions, not the log: a start-up warning (kernels weaker
		// than the CPU's, when OPENBLAS_CORETYPE presets them) carries a time
		wantOut := d.stdout("predict", "--run", "sim", "--client", c, "--image", imgPath, "--top", "5")
		gotOut := d.stdout("predict", "--run", "coord/out", "--client", c, "--image", imgPath, "--top", "5")
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
