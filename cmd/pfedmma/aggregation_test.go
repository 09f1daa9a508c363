package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/pfedmma/pfedmma/config"
)

// TestServeAggregationEqualsRun: serve's hardening flags are shorthands
// for the aggregation section: `serve --aggregate median --clip-norm C`
// (and `--dp-noise-multiplier σ --dp-clip C`) with three sites started
// with the equivalent --set aggregation.… gives bit for bit the global
// tensors, the table and the ε per round of `pfedmma run` with those
// --set overrides, and another result than the run without them.
func TestServeAggregationEqualsRun(t *testing.T) {
	t.Parallel() // its processes wait (rounds, retries) more than they compute
	d := newProcDir(t)
	dir, run := d.dir, d.run
	run("certs", "init", "--dir", "certs", "--sites", "site-a,site-b,site-c")
	base := []string{"--set", "methods=[pfedmma]", "--set", "federation.clients=3", "--set", "federation.rounds=2"}
	run(append([]string{"run", "--quiet", "--out", "plain"}, base...)...)
	table := func(s string) string {
		i, j := strings.Index(s, "Method"), strings.Index(s, "results")
		if i < 0 || j < i {
			t.Fatalf("no table in:\n%s", s)
		}
		return s[i:j]
	}
	for _, c := range []struct {
		name  string
		flags []string // serve's
		sets  []string // the equivalent configuration
	}{
		{"median", []string{"--aggregate", "median", "--clip-norm", "0.05"},
			[]string{"aggregation.rule=median", "aggregation.clip_norm=0.05"}},
		{"dp", []string{"--dp-noise-multiplier", "0.5", "--dp-clip", "0.05"},
			[]string{"aggregation.dp.noise_multiplier=0.5", "aggregation.dp.clip=0.05"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := d.sub(t)
			sets := append([]string(nil), base...)
			for _, s := range c.sets {
				sets = append(sets, "--set", s)
			}
			sim := d.run(append([]string{"run", "--quiet", "--out", "sim-" + c.name}, sets...)...)

			addr := freeAddr(t)
			serve := append([]string{"serve", "--listen", addr, "--certs", "certs", "--state", "coord-" + c.name}, base...)
			coord := d.start("serve", append(serve, c.flags...)...)
			var sites []*opsProc
			for _, s := range []string{"site-a", "site-b", "site-c"} {
				sites = append(sites, d.start(s, append([]string{"site", "--server", addr, "--certs", "certs", "--name", s, "--data", "world", "--state", c.name + "-" + s}, sets...)...))
			}
			expectExit(t, coord, 180*time.Second, 0)
			for _, s := range sites {
				expectExit(t, s, 60*time.Second, 0)
			}
			want := readTensors(t, filepath.Join(dir, "sim-"+c.name, "global", "pfedmma.safetensors"))
			got := readTensors(t, filepath.Join(dir, "coord-"+c.name, "out", "global", "pfedmma.safetensors"))
			plain := readTensors(t, filepath.Join(dir, "plain", "global", "pfedmma.safetensors"))
			if len(want) == 0 || len(want) != len(got) {
				t.Fatalf("global tensors: %d in the simulation, %d from the federation", len(want), len(got))
			}
			same := true
			for k, w := range want {
				if !bytes.Equal(w, got[k]) {
					t.Errorf("global %s differs between run --set %v and serve %v", k, c.sets, c.flags)
				}
				same = same && bytes.Equal(w, plain[k])
			}
			if same {
				t.Errorf("run --set %v gives the global tensors of the run without them", c.sets)
			}
			log := coord.output()
			if table(sim) != table(log[strings.LastIndex(log, "world —"):]) {
				t.Errorf("tables differ:\nrun:\n%s\nserve:\n%s", sim, log)
			}
			// the ε per round, the same in both metrics.jsonl
			simM, err1 := os.ReadFile(filepath.Join(dir, "sim-"+c.name, "metrics.jsonl"))
			srvM, err2 := os.ReadFile(filepath.Join(dir, "coord-"+c.name, "out", "metrics.jsonl"))
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			n := strings.Count(string(simM), `"dp_epsilon"`)
			if want := map[string]int{"median": 0, "dp": 2}[c.name]; n != want || strings.Count(string(srvM), `"dp_epsilon"`) != want {
				t.Errorf("dp_epsilon in %d records of run's metrics.jsonl, want %d:\n%s\nserve's:\n%s", n, want, simM, srvM)
			}
		})
	}
}

// TestServeFlagsAreShorthands: each robust/DP flag of serve becomes its
// aggregation key's --set, only when given (the configuration's value
// stands otherwise); an unknown --aggregate is refused naming the flag and
// a bad value naming the key.
func TestServeFlagsAreShorthands(t *testing.T) {
	serve, _, err := rootCmd.Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"aggregate", "trim", "clip-norm", "dp-noise-multiplier", "dp-clip", "dp-delta"} {
		if serve.Flags().Lookup(name) == nil {
			t.Fatalf("serve has no --%s", name)
		}
	}
	parse := func(args ...string) ([]string, error) {
		t.Helper()
		var r robustFlags
		fl := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		r.add(fl)
		if err := fl.Parse(args); err != nil {
			t.Fatal(err)
		}
		return r.sets(fl)
	}
	sets, err := parse()
	if err != nil || len(sets) != 0 {
		t.Errorf("no flags: %v, %v", sets, err)
	}
	sets, err = parse("--aggregate", "trimmed-mean", "--trim", "0.2", "--clip-norm", "1.5", "--dp-delta", "1e-06")
	want := []string{"aggregation.rule=trimmed_mean", "aggregation.trim=0.2", "aggregation.clip_norm=1.5", "aggregation.dp.delta=1e-06"}
	if err != nil || strings.Join(sets, " ") != strings.Join(want, " ") {
		t.Errorf("flags gave %v, %v; want %v", sets, err, want)
	}
	if e, err := config.Compose(config.Sources{Sets: sets}); err != nil || e.Aggregation.DP.Delta != 1e-6 || e.Aggregation.Trim != 0.2 {
		t.Errorf("the flags' sets do not compose: %v", err)
	}
	sets, err = parse("--dp-noise-multiplier", "1.1", "--dp-clip", "0.5")
	want = []string{"aggregation.dp.noise_multiplier=1.1", "aggregation.dp.clip=0.5"}
	if err != nil || strings.Join(sets, " ") != strings.Join(want, " ") {
		t.Errorf("dp flags gave %v, %v; want %v", sets, err, want)
	}
	if _, err := parse("--aggregate", "krum"); err == nil || !strings.Contains(err.Error(), "--aggregate") {
		t.Errorf("--aggregate krum: %v", err)
	}
	sets, _ = parse("--aggregate", "median", "--trim", "0.2")
	if _, err := config.Compose(config.Sources{Sets: sets}); err == nil || !strings.Contains(err.Error(), "aggregation.trim:") {
		t.Errorf("--aggregate median --trim 0.2: %v, want an error naming aggregation.trim", err)
	}
	// a flag overrides the file's value; the file's value stands without it
	file := []byte("aggregation: {rule: median}\n")
	sets, _ = parse("--aggregate", "mean")
	if e, err := config.Compose(config.Sources{File: "x.yaml", Data: file, Sets: sets}); err != nil || e.Aggregation.Rule != config.RuleMean {
		t.Errorf("--aggregate mean over a file's median: %v", err)
	}
	sets, _ = parse("--clip-norm", "2")
	if e, err := config.Compose(config.Sources{File: "x.yaml", Data: file, Sets: sets}); err != nil || e.Aggregation.Rule != config.RuleMedian || e.Aggregation.ClipNorm != 2 {
		t.Errorf("--clip-norm beside a file's median: %+v, %v", e.Aggregation, err)
	}
}
