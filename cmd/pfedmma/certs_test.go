package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/certs"
)

// TestCertsRevokeAndRekey: `certs revoke` revokes a site's certificate by
// serial (not its name), an operator's with --operator, any certificate
// with --serial; bad or missing arguments are refused naming the flags;
// `certs rekey` issues the site a new certificate whose serial is not
// revoked while the old one is.
func TestCertsRevokeAndRekey(t *testing.T) {
	dir := t.TempDir()
	if err := certs.Init(dir, []string{"site-a", "site-b"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := certs.AddOperator(dir, "alice"); err != nil {
		t.Fatal(err)
	}
	serial := func(path string) string {
		c, err := certs.ReadCertificate(filepath.Join(dir, path))
		if err != nil {
			t.Fatal(err)
		}
		return certs.SerialHex(c)
	}
	oldA := serial("sites/site-a.crt")
	for _, args := range [][]string{{}, {"site-a", "--serial", "ab"}, {"--operator"}} {
		if _, err := execute(t, append([]string{"certs", "revoke", "--dir", dir}, args...)...); err == nil || !strings.Contains(err.Error(), "--serial") {
			t.Errorf("certs revoke %v: %v, want a refusal naming the choices", args, err)
		}
	}
	if _, err := execute(t, "certs", "revoke", "--dir", dir, "--serial", "xyz"); err == nil || !strings.Contains(err.Error(), "--serial") {
		t.Errorf("certs revoke --serial xyz: %v", err)
	}
	if _, err := execute(t, "certs", "revoke", "--dir", dir, "site-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := execute(t, "certs", "revoke", "--dir", dir, "--operator", "alice"); err != nil {
		t.Fatal(err)
	}
	out, err := execute(t, "certs", "rekey", "--dir", dir, "site-a")
	if err != nil || !strings.Contains(out, "new one") {
		t.Fatalf("certs rekey: %q, %v", out, err)
	}
	rev, err := certs.ReadRevocations(dir)
	if err != nil {
		t.Fatal(err)
	}
	newA := serial("sites/site-a.crt")
	if rev.Serials[oldA] != "site-a" || rev.Serials[serial("operators/alice.crt")] != "operator:alice" {
		t.Fatalf("revoked.txt serials %v: want site-a's old certificate and alice's", rev.Serials)
	}
	if _, bad := rev.Serials[newA]; bad || newA == oldA || len(rev.Names) != 0 {
		t.Fatalf("after rekey: new serial %s (old %s) revoked or names %v revoked", newA, oldA, rev.Names)
	}
	if id, err := certs.SiteID(dir, "site-a"); err != nil || id != 0 {
		t.Fatalf("site-a's client ID after rekey: %d, %v", id, err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, certs.RevokedFile))
	if strings.Count(string(b), "\n") != 2 {
		t.Fatalf("revoked.txt:\n%s", b)
	}
}
