package certs

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// opensslSerial is a certificate's serial as `openssl x509 -serial` prints
// it (upper-case hex, even length), the form an operator pastes.
func opensslSerial(t *testing.T, path string) string {
	t.Helper()
	c, err := ReadCertificate(path)
	if err != nil {
		t.Fatal(err)
	}
	h := strings.ToUpper(c.SerialNumber.Text(16))
	if len(h)%2 == 1 {
		h = "0" + h
	}
	return h
}

// TestRevokeByCertificate: revocation by serial (as openssl prints it) or
// by SHA-256 fingerprint (with colons) refuses that certificate at the
// handshake and no other; a re-keyed site's new certificate is accepted
// while the old one stays refused; an older list's bare name still revokes
// every certificate of the site, and rekey lifts it for the new one.
func TestRevokeByCertificate(t *testing.T) {
	dir := t.TempDir()
	if err := Init(dir, []string{"site-a", "site-b", "site-c"}, nil); err != nil {
		t.Fatal(err)
	}
	srv, err := ServerTLS(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	dial := func(name string) error {
		cli, err := SiteTLS(dir, name, "")
		if err != nil {
			t.Fatal(err)
		}
		return handshake(t, srv, cli)
	}
	// by serial, upper case as openssl prints it
	if err := RevokeSerial(dir, opensslSerial(t, filepath.Join(dir, SitesDir, "site-a.crt")), ""); err != nil {
		t.Fatal(err)
	}
	if err := dial("site-a"); err == nil || !strings.Contains(err.Error(), "serial") {
		t.Fatalf("site-a revoked by serial: %v", err)
	}
	// by fingerprint, as openssl -fingerprint -sha256 prints it (colons)
	raw, _ := os.ReadFile(filepath.Join(dir, SitesDir, "site-b.crt"))
	cb, _ := ReadCertificate(filepath.Join(dir, SitesDir, "site-b.crt"))
	sum := sha256.Sum256(cb.Raw)
	var parts []string
	for _, x := range sum {
		parts = append(parts, strings.ToUpper(hex.EncodeToString([]byte{x})))
	}
	if len(raw) == 0 {
		t.Fatal("no site-b.crt")
	}
	if err := RevokeFingerprint(dir, strings.Join(parts, ":"), "site-b"); err != nil {
		t.Fatal(err)
	}
	if err := dial("site-b"); err == nil || !strings.Contains(err.Error(), "fingerprint") {
		t.Fatalf("site-b revoked by fingerprint: %v", err)
	}
	if err := dial("site-c"); err != nil {
		t.Fatalf("site-c, not revoked: %v", err)
	}
	// re-keyed: the new certificate passes, the old one does not
	oldA, _ := SiteTLS(dir, "site-a", "")
	if err := Rekey(dir, "site-a"); err != nil {
		t.Fatal(err)
	}
	if err := dial("site-a"); err != nil {
		t.Fatalf("site-a re-keyed: %v", err)
	}
	if err := handshake(t, srv, oldA); err == nil {
		t.Fatal("site-a's old certificate accepted after rekey")
	}
	// an older list's bare name revokes every certificate of the site
	f, err := os.OpenFile(filepath.Join(dir, RevokedFile), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("# older list\nsite-c\n")
	f.Close()
	if err := dial("site-c"); err == nil || !strings.Contains(err.Error(), "by name") {
		t.Fatalf("site-c revoked by name: %v", err)
	}
	if err := Rekey(dir, "site-c"); err != nil {
		t.Fatal(err)
	}
	if err := dial("site-c"); err != nil {
		t.Fatalf("site-c re-keyed after a revocation by name: %v", err)
	}
	rev, err := ReadRevocations(dir)
	if err != nil {
		t.Fatal(err)
	}
	if rev.Names["site-c"] || len(rev.Serials) != 2 || len(rev.Fingerprints) != 1 {
		t.Fatalf("revoked.txt after rekey: names %v, serials %v, fingerprints %v", rev.Names, rev.Serials, rev.Fingerprints)
	}
	if err := Revoke(dir, "nobody"); err == nil {
		t.Fatal("revoking an unknown site succeeded")
	}
}

// TestRevokedListErrors: a malformed line is an error naming the file and
// line, and a bad serial or fingerprint given to revoke is refused.
func TestRevokedListErrors(t *testing.T) {
	dir := t.TempDir()
	for _, bad := range []string{"serial:xyz", "sha256:abcd", "two words", "md5:00 a"} {
		if err := os.WriteFile(filepath.Join(dir, RevokedFile), []byte("# ok\n\n"+bad+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadRevocations(dir)
		if err == nil || !strings.Contains(err.Error(), RevokedFile+" line 3") {
			t.Errorf("revoked.txt with %q: %v, want an error naming the file and line 3", bad, err)
		}
	}
	if err := RevokeSerial(dir, "12g4", ""); err == nil || !strings.Contains(err.Error(), "--serial") {
		t.Errorf("RevokeSerial(12g4): %v", err)
	}
	if err := RevokeFingerprint(dir, "ab:cd", ""); err == nil || !strings.Contains(err.Error(), "want 64") {
		t.Errorf("RevokeFingerprint(ab:cd): %v", err)
	}
}

// TestOperatorRevoked: the dashboard's TLS configuration refuses a revoked
// operator certificate at the handshake (and still accepts another
// operator's, and a client without a certificate, which then needs the
// token).
func TestOperatorRevoked(t *testing.T) {
	dir := t.TempDir()
	if err := Init(dir, []string{"site-a"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"alice", "bob"} {
		if err := AddOperator(dir, op); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := OperatorsTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	alice, _ := OperatorClientTLS(dir, "alice")
	bob, _ := OperatorClientTLS(dir, "bob")
	alice.ServerName, bob.ServerName = "localhost", "localhost"
	if err := handshake(t, srv, alice); err != nil {
		t.Fatalf("alice before revocation: %v", err)
	}
	if err := RevokeOperator(dir, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, srv, alice); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("alice revoked: %v, want the handshake refused", err)
	}
	if err := handshake(t, srv, bob); err != nil {
		t.Fatalf("bob: %v", err)
	}
	plain := bob.Clone()
	plain.Certificates = nil
	if err := handshake(t, srv, plain); err != nil {
		t.Fatalf("no client certificate: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, RevokedFile))
	if !strings.Contains(string(b), "operator:alice") {
		t.Fatalf("revoked.txt does not note whose certificate:\n%s", b)
	}
}
