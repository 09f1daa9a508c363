package certs

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// OperatorsDir is the folder, inside the certificates folder, of the
// operators' certificates (certs add-operator).
const OperatorsDir = "operators"

// OperatorUnit is the organizational unit that marks an operator
// certificate: it opens the dashboard, /api/status and /metrics, never the
// federation's gRPC service (the CN is not a site).
const OperatorUnit = "pfedmma-operator"

// AddOperator issues a client certificate for operator name, signed by the
// federation's CA, as operators/NAME.crt and operators/NAME.key.
func AddOperator(dir, name string) error {
	if err := checkNames([]string{name}); err != nil {
		return fmt.Errorf("certs add-operator %s: %w", dir, err)
	}
	ca, caKey, err := loadCA(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, OperatorsDir), 0o700); err != nil {
		return fmt.Errorf("certs add-operator: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, OperatorsDir, name+".crt")); err == nil {
		return fmt.Errorf("certs add-operator: %s already exists", filepath.Join(dir, OperatorsDir, name+".crt"))
	}
	tmpl := leaf(pkix.Name{CommonName: name, OrganizationalUnit: []string{OperatorUnit}}, time.Now(), x509.ExtKeyUsageClientAuth)
	return issue(filepath.Join(dir, OperatorsDir), name+".crt", name+".key", tmpl, ca, caKey)
}

// IsOperator reports whether a verified client certificate is an operator
// certificate (see AddOperator).
func IsOperator(c *x509.Certificate) bool {
	return c != nil && slices.Contains(c.Subject.OrganizationalUnit, OperatorUnit)
}

// OperatorsTLS returns the dashboard's TLS 1.3 configuration: the
// coordinator's certificate, and client certificates verified against the
// federation's CA when given and refused when revoked.txt revokes them (the
// handler then requires an operator certificate or a bearer token).
func OperatorsTLS(dir string) (*tls.Config, error) {
	cfg, err := ServerOnlyTLS(dir)
	if err != nil {
		return nil, err
	}
	pool, err := caPool(dir)
	if err != nil {
		return nil, err
	}
	cfg.ClientAuth, cfg.ClientCAs = tls.VerifyClientCertIfGiven, pool
	cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return nil // no certificate: the handler asks for the token
		}
		leaf, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return fmt.Errorf("client certificate: %w", err)
		}
		if err := checkRevoked(dir, leaf); err != nil {
			return fmt.Errorf("certificate of %q: %w", leaf.Subject.CommonName, err)
		}
		return nil
	}
	return cfg, nil
}

// OperatorClientTLS returns the TLS configuration with which operator name
// (AddOperator) opens the dashboard.
func OperatorClientTLS(dir, name string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, OperatorsDir, name+".crt"), filepath.Join(dir, OperatorsDir, name+".key"))
	if err != nil {
		return nil, fmt.Errorf("certs: operator %q: %w", name, err)
	}
	pool, err := caPool(dir)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, Certificates: []tls.Certificate{cert}}, nil
}
