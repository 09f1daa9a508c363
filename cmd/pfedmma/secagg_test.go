package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/safetensors"
)

// TestServeSitesSecureAggregation runs the world job (pFedMMA, 3 sites, 3
// rounds) as a real federation with `serve --secure-aggregation`: the
// global tensors equal `pfedmma run` with federation.secure_aggregation
// bit for bit (the simulation quantises as the sites do; the masked sum is
// exact), and are within 1e-4 of the plain run's (2^-25 per value and
// aggregation, carried through 3 rounds of training). The sites are
// started with no experiment flags: the setting comes with the task. The
// coordinator's log shows only masked updates.
func TestServeSitesSecureAggregation(t *testing.T) {
	t.Parallel() // its processes wait (rounds, retries) more than they compute
	d := newProcDir(t)
	dir, run := d.dir, d.run
	sets := []string{"--set", "methods=[pfedmma]", "--set", "federation.clients=3", "--set", "federation.rounds=3"}
	secure := append([]string{"--set", "federation.secure_aggregation=true"}, sets...)
	run(append([]string{"run", "--quiet", "--out", "plain"}, sets...)...)
	run(append([]string{"run", "--quiet", "--out", "sim"}, secure...)...)

	addr := freeAddr(t)
	names := "site-a,site-b,site-c"
	coord := d.start("serve", append([]string{"serve", "--listen", addr, "--insecure-dev", "--sites", names, "--state", "coord", "--secure-aggregation"}, sets...)...)
	for _, s := range strings.Split(names, ",") {
		// the experiment, secure aggregation included, comes with the task
		d.start(s, "site", "--server", addr, "--insecure-dev", "--sites", names, "--name", s, "--data", "world", "--state", "state-"+s)
	}
	expectExit(t, coord, 180*time.Second, 0)
	log := coord.output()
	if strings.Count(log, `msg="masked update accepted"`) != 9 || strings.Contains(log, `msg="update accepted"`) {
		t.Errorf("want 9 masked updates and none in the clear:\n%s", log)
	}
	read := func(path string) map[string][]float32 {
		t.Helper()
		f, err := safetensors.Open(filepath.Join(dir, path))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		all, err := f.Float32All()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]float32{}
		for k, v := range all {
			out[k] = v.Data
		}
		return out
	}
	net, sim, plain := read("coord/out/global/pfedmma.safetensors"), read("sim/global/pfedmma.safetensors"), read("plain/global/pfedmma.safetensors")
	if len(sim) == 0 || len(net) != len(sim) || len(plain) != len(sim) {
		t.Fatalf("global tensors: %d from serve, %d from run, %d from the plain run", len(net), len(sim), len(plain))
	}
	var diff float64
	for k, s := range sim {
		for i, v := range s {
			if net[k][i] != v {
				t.Fatalf("global %s[%d]: serve %v, run %v (want bit-identical)", k, i, net[k][i], v)
			}
			diff = max(diff, math.Abs(float64(v)-float64(plain[k][i])))
		}
	}
	if diff > 1e-4 {
		t.Errorf("secure aggregation's global is %g from the plain run's", diff)
	}
	t.Logf("secure vs plain global: max difference %g", diff)
	// the bytes per round are the masked updates', in run as in serve
	bytesUp := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, path))
		if err != nil {
			t.Fatal(err)
		}
		var sum map[string]any
		if err := json.Unmarshal(b, &sum); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(sum["update_bytes_per_round_per_site"])
	}
	if s, n := bytesUp("sim/summary.json"), bytesUp("coord/out/summary.json"); s != n || s == "<nil>" {
		t.Errorf("update bytes per round per site: run %s, serve %s", s, n)
	}
}

// TestSecureAggregationFlag: serve's --secure-aggregation is the key
// federation.secure_aggregation.
func TestSecureAggregationFlag(t *testing.T) {
	var r robustFlags
	fl := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	r.add(fl)
	if err := fl.Parse([]string{"--secure-aggregation"}); err != nil {
		t.Fatal(err)
	}
	sets, err := r.sets(fl)
	if err != nil || strings.Join(sets, " ") != "federation.secure_aggregation=true" {
		t.Fatalf("--secure-aggregation gave %v, %v", sets, err)
	}
	e, err := config.Compose(config.Sources{Sets: sets})
	if err != nil || !e.Federation.SecureAggregation {
		t.Fatalf("the flag's set does not compose: %v", err)
	}
}
