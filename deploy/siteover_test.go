package deploy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/transport"
)

// writeOverRecord writes, as a site does when told the federation ended,
// the record of site name's federation (coordinator addr, the CA of
// certsDir) into state/state.
func writeOverRecord(t *testing.T, state, addr, certsDir, name, ended string) {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(certsDir, certs.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(ca)
	b, _ := json.Marshal(transport.FederationOver{Server: addr, CA: hex.EncodeToString(sum[:]), Site: name, Ended: ended, At: time.Now().UTC()})
	if err := os.MkdirAll(filepath.Join(state, "state"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "state", transport.OverFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSitesAfterFederationFinished: a site (and a process hosting several)
// started on state folders recording that their federation finished, for
// the same coordinator, returns at once with the record, asking no
// coordinator (none listens); with one hosted client's federation not over
// the process asks the coordinator (and here waits until its context ends),
// as does a site whose record says the coordinator stopped.
func TestSitesAfterFederationFinished(t *testing.T) {
	dir := t.TempDir()
	certsDir := filepath.Join(dir, "certs")
	if err := certs.Init(certsDir, []string{"site-a", "site-b"}, nil); err != nil {
		t.Fatal(err)
	}
	const addr = "127.0.0.1:1" // nothing listens there
	c := SiteConfig{Server: addr, Certs: certsDir, Data: "world", Model: smallModel(t)}
	for _, n := range []string{"site-a", "site-b"} {
		writeOverRecord(t, filepath.Join(dir, "site-"+n), addr, certsDir, n, transport.EndFinished)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	one := c
	one.Name, one.State = "site-b", filepath.Join(dir, "site-site-b")
	res, err := Site(ctx, one)
	if err != nil || res.Over == nil || !res.Over.Finished() || res.ID != 1 || res.OverFile != filepath.Join(one.State, "state", transport.OverFile) {
		t.Fatalf("Site on a finished federation's folder: %+v, %v", res, err)
	}
	hc := c
	hc.State = dir
	hosted, err := HostSites(ctx, hc, "0-1")
	if err != nil || len(hosted) != 2 || hosted[0].Over == nil || hosted[1].Over == nil || hosted[0].Name != "site-a" {
		t.Fatalf("HostSites on finished federations' folders: %+v, %v", hosted, err)
	}
	if ctx.Err() != nil {
		t.Fatal("they waited for the coordinator")
	}
	// site-b's coordinator stopped: the process waits for it
	writeOverRecord(t, filepath.Join(dir, "site-site-b"), addr, certsDir, "site-b", transport.EndStopped)
	short, stop := context.WithTimeout(t.Context(), 2*time.Second)
	defer stop()
	if res, err := HostSites(short, hc, "0-1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("HostSites with a stopped federation: %+v, %v; want it to wait for the coordinator", res, err)
	}
	short, stop = context.WithTimeout(t.Context(), 2*time.Second)
	defer stop()
	if res, err := Site(short, one); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Site with a stopped federation: %+v, %v; want it to wait for the coordinator", res, err)
	}
}
