package transport

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/certs"
)

// TestFederationOverRecord: the record of a federation's end applies to
// the same coordinator address, CA and site only; another address, another
// federation's CA or another site read nothing (the site then asks the
// coordinator), and a damaged record is an error naming the file and the
// field.
func TestFederationOverRecord(t *testing.T) {
	ca1, ca2 := t.TempDir(), t.TempDir()
	for _, d := range []string{ca1, ca2} {
		if err := certs.Init(d, []string{"site-a", "site-b"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	state := t.TempDir()
	cfg := SiteConfig{Addr: "127.0.0.1:7443", CertsDir: ca1, Name: "site-a", StateDir: state}
	if o, err := ReadOver(cfg); err != nil || o != nil {
		t.Fatalf("no record yet: %+v, %v", o, err)
	}
	if err := recordOver(cfg, EndFinished, ""); err != nil {
		t.Fatal(err)
	}
	o, err := ReadOver(cfg)
	if err != nil || o == nil || !o.Finished() || o.Server != cfg.Addr || o.Site != "site-a" || len(o.CA) != 64 {
		t.Fatalf("the record read back: %+v, %v", o, err)
	}
	for name, other := range map[string]SiteConfig{
		"another address": {Addr: "127.0.0.1:7444", CertsDir: ca1, Name: "site-a", StateDir: state},
		"another CA":      {Addr: cfg.Addr, CertsDir: ca2, Name: "site-a", StateDir: state},
		"another site":    {Addr: cfg.Addr, CertsDir: ca1, Name: "site-b", StateDir: state},
		"clear text":      {Addr: cfg.Addr, Insecure: true, Name: "site-a", StateDir: state},
	} {
		if o, err := ReadOver(other); err != nil || o != nil {
			t.Errorf("%s: %+v, %v; want no record", name, o, err)
		}
	}
	if err := recordOver(cfg, EndStopped, "stopped after 3 of 60 rounds"); err != nil {
		t.Fatal(err)
	}
	if o, err := ReadOver(cfg); err != nil || o == nil || o.Finished() || o.Reason != "stopped after 3 of 60 rounds" {
		t.Fatalf("a stop read back: %+v, %v", o, err)
	}
	path := filepath.Join(state, OverFile)
	for content, want := range map[string]string{
		"{not json":                        path,
		`{"ended": "paused", "site": "x"}`: "field ended",
	} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadOver(cfg); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), want) {
			t.Errorf("record %q: %v, want an error naming %s and %q", content, err, path, want)
		}
	}
}
