package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/certs"
)

// TestSiteInsecureWithCertsRefused: --insecure-dev would ignore --certs, so
// the two together are refused, naming both flags.
func TestSiteInsecureWithCertsRefused(t *testing.T) {
	_, err := execute(t, "site", "--server", "127.0.0.1:1", "--name", "a", "--insecure-dev", "--certs", t.TempDir(),
		"--data", t.TempDir(), "--state", filepath.Join(t.TempDir(), "state"))
	if err == nil || !strings.Contains(err.Error(), "--insecure-dev") || !strings.Contains(err.Error(), "--certs") {
		t.Fatalf("site --insecure-dev --certs: %v, want a refusal naming both flags", err)
	}
}

// TestCertsAddOperator: the command writes an operator certificate that the
// dashboard recognises as such, and refuses to overwrite it.
func TestCertsAddOperator(t *testing.T) {
	dir := t.TempDir()
	if err := certs.Init(dir, []string{"site-a"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := execute(t, "certs", "add-operator", "--dir", dir, "alice"); err != nil {
		t.Fatal(err)
	}
	cfg, err := certs.OperatorClientTLS(dir, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Certificates) != 1 || !certs.IsOperator(cfg.Certificates[0].Leaf) {
		t.Fatalf("operators/alice.crt is not an operator certificate")
	}
	if _, err := os.Stat(filepath.Join(dir, certs.OperatorsDir, "alice.key")); err != nil {
		t.Fatal(err)
	}
	if _, err := execute(t, "certs", "add-operator", "--dir", dir, "alice"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second add-operator alice: %v, want a refusal", err)
	}
}

// TestServeInsecureFlags: serve --insecure-dev would ignore the
// certificates of --certs, so the two are refused together; its sites are
// then named with --sites, which certificates make unnecessary.
func TestServeInsecureFlags(t *testing.T) {
	state := filepath.Join(t.TempDir(), "coord")
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--insecure-dev", "--certs", t.TempDir()}, []string{"--insecure-dev", "--certs", "--sites"}},
		{[]string{"--insecure-dev"}, []string{"--insecure-dev", "--sites"}},
		{[]string{"--certs", t.TempDir(), "--sites", "a,b,c"}, []string{"--sites", "--insecure-dev"}},
	} {
		args := append([]string{"serve", "--listen", "127.0.0.1:0", "--state", state}, c.args...)
		_, err := execute(t, args...)
		if err == nil {
			t.Errorf("serve %v: accepted", c.args)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("serve %v: %v, want it to name %s", c.args, err, w)
			}
		}
	}
}
