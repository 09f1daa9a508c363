package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeCompressedEqualsRun: CLIP-LoRA under aggregate: product (dense
// D×D deltas) as a federation over the network with `serve --compress
// int8` (sites started with no experiment flags: the task carries the
// setting) ends with the global tensors, the table and the summary's bytes
// of `pfedmma run --set federation.compress=int8`, bit for bit; the
// summary counts the int8 bytes, under a third of float32's.
func TestServeCompressedEqualsRun(t *testing.T) {
	t.Parallel() // its processes wait (rounds, retries) more than they compute
	d := newProcDir(t)
	dir, run := d.dir, d.run
	sets := []string{"--set", "methods=[clip_lora]", "--set", "clip_lora.aggregate=product", "--set", "federation.clients=3",
		"--set", "federation.rounds=2", "--set", "federation.local_epochs=1"}
	sim := run(append([]string{"run", "--quiet", "--out", "sim", "--set", "federation.compress=int8"}, sets...)...)
	run(append([]string{"run", "--quiet", "--out", "plain"}, sets...)...)

	addr := freeAddr(t)
	names := "site-a,site-b,site-c"
	coord := d.start("serve", append([]string{"serve", "--listen", addr, "--insecure-dev", "--sites", names, "--state", "coord", "--compress", "int8"}, sets...)...)
	// the sites receive the experiment, compression included, from the
	// coordinator
	for _, s := range strings.Split(names, ",") {
		d.start(s, "site", "--server", addr, "--insecure-dev", "--sites", names, "--name", s, "--data", "world", "--state", "state-"+s)
	}
	expectExit(t, coord, 180*time.Second, 0)
	want := readTensors(t, filepath.Join(dir, "sim/global/clip_lora.safetensors"))
	got := readTensors(t, filepath.Join(dir, "coord/out/global/clip_lora.safetensors"))
	plain := readTensors(t, filepath.Join(dir, "plain/global/clip_lora.safetensors"))
	if len(want) == 0 || len(want) != len(got) {
		t.Fatalf("global tensors: %d in the simulation, %d from the federation", len(want), len(got))
	}
	changed := false
	for k, w := range want {
		if !bytes.Equal(w, got[k]) {
			t.Errorf("global %s differs between run and serve + sites with int8", k)
		}
		changed = changed || !bytes.Equal(w, plain[k])
	}
	if !changed {
		t.Error("int8 left every global tensor as without compression: not applied")
	}
	table := func(s string) string { return s[strings.Index(s, "Method"):strings.Index(s, "results")] }
	if log := coord.output(); table(sim) != table(log[strings.LastIndex(log, "world —"):]) {
		t.Errorf("tables differ:\nrun:\n%s\nserve:\n%s", sim, log)
	}
	summary := func(dir string) map[string]any {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	ss, cs, ps := summary(filepath.Join(dir, "sim")), summary(filepath.Join(dir, "coord/out")), summary(filepath.Join(dir, "plain"))
	for _, k := range []string{"compress", "update_bytes_per_round_per_site", "download_bytes_per_round_per_site", "update_bytes_total", "download_bytes_total"} {
		if fmt.Sprint(ss[k]) != fmt.Sprint(cs[k]) {
			t.Errorf("summary.json %s: run %v, serve %v", k, ss[k], cs[k])
		}
	}
	if ss["compress"] != "int8" || ps["compress"] != "none" {
		t.Errorf("summary.json compress: %v and %v, want int8 and none", ss["compress"], ps["compress"])
	}
	up := func(m map[string]any) float64 {
		return m["update_bytes_per_round_per_site"].(map[string]any)["clip_lora"].(float64)
	}
	if up(ss) <= 0 || up(ss)*3 > up(ps) {
		t.Errorf("update bytes per round per site: int8 %v, float32 %v (want under a third)", up(ss), up(ps))
	}
}
