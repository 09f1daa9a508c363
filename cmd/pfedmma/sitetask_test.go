package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/assets"
)

// TestSiteTaskPolicy: a site refuses the coordinator's task when its
// policy or model do not accept it — method not accepted, upload too
// large, another model's hash, experiment flags that differ — and exits
// non-zero with the reason, which the coordinator logs naming the site; a
// site holding an exact copy of the coordinator's model accepts.
func TestSiteTaskPolicy(t *testing.T) {
	t.Parallel() // its processes wait (rounds, retries) more than they compute
	d := newProcDir(t)
	dir := d.dir
	// a copy of the embedded model (accepted) and one with a weight
	// changed (refused by its hash), each with its vocabulary
	src, err := assets.DefaultModelDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, copyDir := range []string{"same", "other"} {
		if err := os.MkdirAll(filepath.Join(dir, copyDir), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{assets.ModelFile, "bpe_simple_vocab_16e6.txt.gz"} {
			b, err := os.ReadFile(filepath.Join(src, name))
			if err != nil {
				t.Fatal(err)
			}
			if copyDir == "other" && name == assets.ModelFile {
				b[len(b)-1] ^= 1
			}
			if err := os.WriteFile(filepath.Join(dir, copyDir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	addr := freeAddr(t)
	sets := []string{"--set", "methods=[pfedmma]", "--set", "federation.clients=3", "--set", "federation.rounds=2"}
	coord := d.start("serve", append([]string{"serve", "--listen", addr, "--insecure-dev", "--sites", "s0,s1,s2", "--state", "coord"}, sets...)...)
	site := func(name string, extra ...string) *opsProc {
		return d.start(name, append([]string{"site", "--server", addr, "--insecure-dev", "--sites", "s0,s1,s2", "--name", name, "--data", "world", "--state", "st-" + name}, extra...)...)
	}
	for _, c := range []struct {
		name, site string
		flags      []string
		want       string
	}{
		{"method not accepted", "s0", []string{"--accept-methods", "promptfl,fedpgp"}, "method pfedmma is not among --accept-methods promptfl,fedpgp"},
		{"upload too large", "s1", []string{"--max-upload-mib", "0.0001"}, "over --max-upload-mib 0.0001"},
		{"another model", "s2", []string{"--model", filepath.Join(dir, "other", assets.ModelFile)}, "the coordinator's model has SHA-256"},
		{"flags differ", "s0", append(append([]string{}, sets...), "--set", "federation.rounds=5"), "federation.rounds: coordinator 2, site 5"},
	} {
		p := site(c.site, c.flags...)
		p.name = c.name
		if code := p.exit(t, 90*time.Second); code == 0 || !strings.Contains(p.output(), c.want) {
			t.Errorf("%s: site exit %d, want a non-zero exit naming %q:\n%s", c.name, code, c.want, p.output())
		}
		// the coordinator logged the refusal, naming the site
		deadline := time.Now().Add(5 * time.Second)
		for !logged(coord.output(), c.site, c.want) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if !logged(coord.output(), c.site, c.want) {
			t.Errorf("%s: the coordinator did not log the refusal of site %s:\n%s", c.name, c.site, tail(coord.output()))
		}
	}
	// an exact copy of the coordinator's model passes the check
	ok := site("s1", "--model", filepath.Join(dir, "same", assets.ModelFile))
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(ok.output(), "task accepted") {
		if time.Now().After(deadline) || strings.Contains(ok.output(), "refuses") {
			t.Fatalf("a copy of the coordinator's model was not accepted:\n%s", ok.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logged reports whether log holds a line naming site and holding want.
func logged(log, site, want string) bool {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "site="+site) && strings.Contains(l, want) && strings.Contains(l, "refused") {
			return true
		}
	}
	return false
}
