package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
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
	sets := []string{"--set", "methods=[clip_lora]", "--set", "clip_lora.aggregate=product", "--set", "federation.clients=3",
		"--set", "federation.rounds=2", "--set", "federation.local_epochs=1"}
	sim := run(append([]string{"run", "--quiet", "--out", "sim", "--set", "federation.compress=int8"}, sets...)...)
	run(append([]string{"run", "--quiet", "--out", "plain"}, sets...)...)

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
	names := "site-a,site-b,site-c"
	coord, coordLog := start(append([]string{"serve", "--listen", addr, "--insecure-dev", "--sites", names, "--state", "coord", "--compress", "int8"}, sets...)...)
	// the sites receive the experiment, compression included, from the
	// coordinator
	for _, s := range strings.Split(names, ",") {
		start("site", "--server", addr, "--insecure-dev", "--sites", names, "--name", s, "--data", "world", "--state", "state-"+s)
	}
	done := make(chan error, 1)
	go func() { done <- coord.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve --compress int8: %v\n%s", err, coordLog.String())
		}
	case <-time.After(180 * time.Second):
		t.Fatalf("serve --compress int8 did not finish:\n%s", coordLog.String())
	}
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
	if table(sim) != table(coordLog.String()[strings.LastIndex(coordLog.String(), "world —"):]) {
		t.Errorf("tables differ:\nrun:\n%s\nserve:\n%s", sim, coordLog.String())
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
