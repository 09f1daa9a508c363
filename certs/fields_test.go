package certs

import (
	"crypto/x509"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestIssuedFields reads back what Init and AddOperator issue: the
// coordinator's certificate is for server authentication on localhost,
// the loopback addresses and the hosts given; a site's and an operator's
// are for client authentication under their names (an operator's in the
// operators' unit); each is signed by the CA, for digital signatures,
// valid from an hour before issue for five years, with its own serial.
func TestIssuedFields(t *testing.T) {
	dir := t.TempDir()
	before := time.Now()
	if err := Init(dir, []string{"site-a"}, []string{"coord.example", "10.1.2.3"}); err != nil {
		t.Fatal(err)
	}
	if err := AddOperator(dir, "alice"); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	read := func(path string) *x509.Certificate {
		t.Helper()
		c, err := ReadCertificate(filepath.Join(dir, path))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ca := read(CAFile)
	serials := map[string]bool{}
	for _, tc := range []struct {
		path, cn, unit string
		usage          x509.ExtKeyUsage
	}{
		{CoordinatorFile, CoordinatorCN, "", x509.ExtKeyUsageServerAuth},
		{filepath.Join(SitesDir, "site-a.crt"), "site-a", "", x509.ExtKeyUsageClientAuth},
		{filepath.Join(OperatorsDir, "alice.crt"), "alice", OperatorUnit, x509.ExtKeyUsageClientAuth},
	} {
		c := read(tc.path)
		if err := c.CheckSignatureFrom(ca); err != nil {
			t.Errorf("%s: not signed by the CA: %v", tc.path, err)
		}
		if c.Subject.CommonName != tc.cn {
			t.Errorf("%s: common name %q, want %q", tc.path, c.Subject.CommonName, tc.cn)
		}
		if unit := c.Subject.OrganizationalUnit; (tc.unit == "") != (len(unit) == 0) || tc.unit != "" && !slices.Equal(unit, []string{tc.unit}) {
			t.Errorf("%s: organizational unit %q, want %q", tc.path, unit, tc.unit)
		}
		if !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{tc.usage}) || c.KeyUsage != x509.KeyUsageDigitalSignature || c.IsCA {
			t.Errorf("%s: usage %v / %v (CA %v), want %v / digital signature", tc.path, c.ExtKeyUsage, c.KeyUsage, c.IsCA, tc.usage)
		}
		// certificates store whole seconds
		if c.NotBefore.Before(before.Add(-time.Hour-time.Second)) || c.NotBefore.After(after.Add(-time.Hour)) ||
			c.NotAfter.Sub(c.NotBefore) != time.Hour+5*365*24*time.Hour {
			t.Errorf("%s: valid %v to %v, want from an hour before issue for five years", tc.path, c.NotBefore, c.NotAfter)
		}
		if serials[c.SerialNumber.String()] {
			t.Errorf("%s: serial %v issued twice", tc.path, c.SerialNumber)
		}
		serials[c.SerialNumber.String()] = true
	}
	coord := read(CoordinatorFile)
	if !slices.Equal(coord.DNSNames, []string{"localhost", "coord.example"}) {
		t.Errorf("coordinator DNS names %v", coord.DNSNames)
	}
	var ips []string
	for _, ip := range coord.IPAddresses {
		ips = append(ips, ip.String())
	}
	if !slices.Equal(ips, []string{"127.0.0.1", net.IPv6loopback.String(), "10.1.2.3"}) {
		t.Errorf("coordinator IP addresses %v", ips)
	}
	for _, path := range []string{filepath.Join(SitesDir, "site-a.crt"), filepath.Join(OperatorsDir, "alice.crt")} {
		if c := read(path); len(c.DNSNames) != 0 || len(c.IPAddresses) != 0 {
			t.Errorf("%s: names %v %v, want none", path, c.DNSNames, c.IPAddresses)
		}
	}
}
