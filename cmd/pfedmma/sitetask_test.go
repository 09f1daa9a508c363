package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
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
	if testing.Short() {
		t.Skip("-short: skipping the multi-process site policy test")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "pfedmma")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var coordLog bytes.Buffer
	sets := []string{"--set", "methods=[pfedmma]", "--set", "federation.clients=3", "--set", "federation.rounds=2"}
	coord := exec.Command(bin, append([]string{"serve", "--listen", addr, "--insecure-dev", "--sites", "s0,s1,s2", "--state", "coord"}, sets...)...)
	coord.Dir, coord.Stdout, coord.Stderr = dir, &coordLog, &coordLog
	if err := coord.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = coord.Process.Kill(); _ = coord.Wait() })
	site := func(name string, extra ...string) *exec.Cmd {
		args := append([]string{"site", "--server", addr, "--insecure-dev", "--sites", "s0,s1,s2", "--name", name, "--data", "world", "--state", "st-" + name}, extra...)
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		return cmd
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
		cmd := site(c.site, c.flags...)
		done := make(chan struct{})
		var out []byte
		go func() { out, err = cmd.CombinedOutput(); close(done) }()
		select {
		case <-done:
		case <-time.After(90 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("%s: the site did not end within 90 s", c.name)
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 || !strings.Contains(string(out), c.want) {
			t.Errorf("%s: site exit %v, want a non-zero exit naming %q:\n%s", c.name, err, c.want, out)
		}
		// the coordinator logged the refusal, naming the site
		deadline := time.Now().Add(5 * time.Second)
		for !logged(coordLog.String(), c.site, c.want) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if !logged(coordLog.String(), c.site, c.want) {
			t.Errorf("%s: the coordinator did not log the refusal of site %s:\n%s", c.name, c.site, coordLog.String())
		}
	}
	// an exact copy of the coordinator's model passes the check
	var out bytes.Buffer
	ok := site("s1", "--model", filepath.Join(dir, "same", assets.ModelFile))
	ok.Stdout, ok.Stderr = &out, &out
	if err := ok.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ok.Process.Kill(); _ = ok.Wait() })
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "task accepted") {
		if time.Now().After(deadline) || strings.Contains(out.String(), "refuses") {
			t.Fatalf("a copy of the coordinator's model was not accepted:\n%s", out.String())
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
