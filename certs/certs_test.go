package certs

import (
	"bytes"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// handshake runs a TLS 1.3 handshake and one byte exchange between the
// coordinator configuration of dir and the client configuration cli; it
// returns the server's error.
func handshake(t *testing.T, srv, cli *tls.Config) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			return
		}
		defer c.Close()
		tc := tls.Client(c, cli)
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		if tc.Handshake() == nil {
			tc.Write([]byte{1})
			io.Copy(io.Discard, tc)
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := tls.Server(c, srv)
	s.SetDeadline(time.Now().Add(5 * time.Second))
	if err := s.Handshake(); err != nil {
		return err
	}
	var buf [1]byte
	if _, err := s.Read(buf[:]); err != nil {
		return err
	}
	if v := s.ConnectionState().Version; v != tls.VersionTLS13 {
		t.Errorf("negotiated TLS version %x, want 1.3", v)
	}
	return nil
}

func TestInitAddRevokeHandshake(t *testing.T) {
	dir := t.TempDir()
	if err := Init(dir, []string{"site-a", "site-b"}, []string{"coord.example", "10.1.2.3"}); err != nil {
		t.Fatal(err)
	}
	if err := Init(dir, []string{"x"}, nil); err == nil {
		t.Fatal("Init over an existing CA succeeded")
	}
	id, err := AddSite(dir, "site-c")
	if err != nil || id != 2 {
		t.Fatalf("AddSite = %d, %v; want 2", id, err)
	}
	if _, err := AddSite(dir, "site-a"); err == nil {
		t.Fatal("AddSite of an existing name succeeded")
	}
	sites, err := Sites(dir)
	if err != nil || !slices.Equal(sites, []string{"site-a", "site-b", "site-c"}) {
		t.Fatalf("Sites = %v, %v", sites, err)
	}
	if id, err := SiteID(dir, "site-b"); err != nil || id != 1 {
		t.Fatalf("SiteID(site-b) = %d, %v", id, err)
	}
	var logs bytes.Buffer
	srv, err := ServerTLS(dir, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"localhost", "coord.example", "10.1.2.3", "127.0.0.1"} {
		cli, err := SiteTLS(dir, "site-c", host)
		if err != nil {
			t.Fatal(err)
		}
		if err := handshake(t, srv, cli); err != nil {
			t.Fatalf("site-c to %s: %v", host, err)
		}
	}
	cli, err := SiteTLS(dir, "site-c", "other.example")
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, srv, cli); err == nil {
		t.Fatal("handshake with a host name outside the SANs succeeded")
	}

	// a site of another federation's CA
	other := t.TempDir()
	if err := Init(other, []string{"site-a"}, nil); err != nil {
		t.Fatal(err)
	}
	foreign, _ := SiteTLS(other, "site-a", "")
	foreign.RootCAs, _ = CAPool(dir)
	if err := handshake(t, srv, foreign); err == nil || !strings.Contains(err.Error(), "not signed") {
		t.Fatalf("foreign CA: %v", err)
	}

	// a certificate signed by our CA for a name that is not a site
	ca, key, err := loadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := issueSite(dir, "intruder", ca, key); err != nil {
		t.Fatal(err)
	}
	intr, _ := SiteTLS(dir, "intruder", "")
	if err := handshake(t, srv, intr); err == nil || !strings.Contains(err.Error(), "unknown site") {
		t.Fatalf("unknown CN: %v", err)
	}

	// revocation applies to the next handshake
	if err := Revoke(dir, "site-b"); err != nil {
		t.Fatal(err)
	}
	if err := Revoke(dir, "nobody"); err == nil {
		t.Fatal("revoking an unknown site succeeded")
	}
	b, _ := SiteTLS(dir, "site-b", "")
	if err := handshake(t, srv, b); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked site: %v", err)
	}
	for _, want := range []string{"not signed", "unknown site", "revoked", "site=intruder", "site=site-b"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	// keys are private
	fi, err := os.Stat(filepath.Join(dir, SitesDir, "site-a.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("site key mode %v, %v", fi.Mode(), err)
	}
}

func TestBadNames(t *testing.T) {
	for _, sites := range [][]string{{"a", "a"}, {"a/b"}, {""}, {CoordinatorCN}, {".."}} {
		if err := Init(t.TempDir(), sites, nil); err == nil {
			t.Errorf("Init(%q) succeeded", sites)
		}
	}
}
