// Package certs makes and loads the federation's X.509 material: one CA, a
// coordinator (server) certificate and one client certificate per site. A
// site's identity is its certificate's Common Name.
//
// Layout of a certificates folder:
//
//	ca.crt, ca.key                 the federation's CA (keep ca.key offline)
//	coordinator.crt, .key          the coordinator's server certificate
//	sites/<name>.crt, .key         one client certificate per site
//	sites.txt                      site names, one a line: line i is client ID i
//	operators/<name>.crt, .key     operators' certificates (the dashboard)
//	revoked.txt                    revoked certificates (revocation.go)
//
// A site needs ca.crt and its own pair only. Revocation is a list of
// certificate serial numbers or fingerprints (older lists: site names)
// rather than a CRL: the coordinator re-reads revoked.txt at every
// handshake, of sites and operators alike, so Revoke takes effect for new
// connections at once.
package certs

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// File names inside a certificates folder.
const (
	CAFile          = "ca.crt"
	CAKeyFile       = "ca.key"
	CoordinatorFile = "coordinator.crt"
	CoordinatorKey  = "coordinator.key"
	SitesFile       = "sites.txt"
	RevokedFile     = "revoked.txt"
	SitesDir        = "sites"
)

// Validity of the certificates made here.
const validity = 5 * 365 * 24 * time.Hour

// CoordinatorCN is the Common Name of the coordinator's certificate.
const CoordinatorCN = "pfedmma-coordinator"

// Init makes a CA, a coordinator certificate valid for localhost, 127.0.0.1,
// ::1 and hosts (DNS names or IP addresses), and one client certificate per
// site, in dir. It refuses a folder that already holds a CA.
func Init(dir string, sites, hosts []string) error {
	if len(sites) == 0 {
		return fmt.Errorf("certs init %s: no sites", dir)
	}
	if err := checkNames(sites); err != nil {
		return fmt.Errorf("certs init %s: %w", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, CAFile)); err == nil {
		return fmt.Errorf("certs init %s: %s exists; refusing to replace the CA", dir, CAFile)
	}
	if err := os.MkdirAll(filepath.Join(dir, SitesDir), 0o755); err != nil {
		return fmt.Errorf("certs init: %w", err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("certs init: CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "pfedmma federation CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("certs init: CA: %w", err)
	}
	if err := writePair(dir, CAFile, CAKeyFile, caDER, caKey); err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return fmt.Errorf("certs init: CA: %w", err)
	}
	srv := leaf(pkix.Name{CommonName: CoordinatorCN}, now, x509.ExtKeyUsageServerAuth)
	srv.DNSNames = []string{"localhost"}
	srv.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			srv.IPAddresses = append(srv.IPAddresses, ip)
		} else if h != "" {
			srv.DNSNames = append(srv.DNSNames, h)
		}
	}
	if err := issue(dir, CoordinatorFile, CoordinatorKey, srv, ca, caKey); err != nil {
		return err
	}
	for _, s := range sites {
		if err := issueSite(dir, s, ca, caKey); err != nil {
			return err
		}
	}
	if err := writeLines(filepath.Join(dir, SitesFile), sites); err != nil {
		return err
	}
	return writeLines(filepath.Join(dir, RevokedFile), nil)
}

// AddSite issues a client certificate for a new site and appends it to
// sites.txt (its client ID is the next free one), returning that ID.
func AddSite(dir, name string) (int, error) {
	sites, err := Sites(dir)
	if err != nil {
		return 0, err
	}
	if err := checkNames(append(slices.Clone(sites), name)); err != nil {
		return 0, fmt.Errorf("certs add-site %s: %w", dir, err)
	}
	ca, caKey, err := loadCA(dir)
	if err != nil {
		return 0, err
	}
	if err := issueSite(dir, name, ca, caKey); err != nil {
		return 0, err
	}
	if err := writeLines(filepath.Join(dir, SitesFile), append(sites, name)); err != nil {
		return 0, err
	}
	return len(sites), nil
}

// Sites reads sites.txt: site i has client ID i.
func Sites(dir string) ([]string, error) {
	lines, err := readLines(filepath.Join(dir, SitesFile))
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	return lines, nil
}

// SiteID returns the client ID of site name.
func SiteID(dir, name string) (int, error) {
	sites, err := Sites(dir)
	if err != nil {
		return 0, err
	}
	i := slices.Index(sites, name)
	if i < 0 {
		return 0, fmt.Errorf("certs: site %q is not in %s", name, filepath.Join(dir, SitesFile))
	}
	return i, nil
}

// ServerTLS returns the coordinator's mTLS configuration: TLS 1.3 only, its
// own certificate, and a client check that refuses (and logs, with the
// reason) certificates not signed by the CA, not meant for client
// authentication, revoked, or whose CN is not a site of sites.txt.
func ServerTLS(dir string, log *slog.Logger) (*tls.Config, error) {
	if log == nil {
		log = slog.Default()
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, CoordinatorFile), filepath.Join(dir, CoordinatorKey))
	if err != nil {
		return nil, fmt.Errorf("certs: coordinator certificate: %w", err)
	}
	pool, err := caPool(dir)
	if err != nil {
		return nil, err
	}
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		cn, err := verifySite(dir, pool, raw)
		if err != nil {
			log.Warn("handshake refused", "site", cn, "reason", err.Error())
			return err
		}
		return nil
	}
	return &tls.Config{
		MinVersion:            tls.VersionTLS13,
		Certificates:          []tls.Certificate{cert},
		ClientAuth:            tls.RequireAnyClientCert,
		VerifyPeerCertificate: verify,
	}, nil
}

// verifySite checks a client chain; it returns the leaf's CN (when it
// parses) and why it is refused.
func verifySite(dir string, pool *x509.CertPool, raw [][]byte) (string, error) {
	if len(raw) == 0 {
		return "", errors.New("no client certificate")
	}
	leaf, err := x509.ParseCertificate(raw[0])
	if err != nil {
		return "", fmt.Errorf("client certificate: %w", err)
	}
	cn := leaf.Subject.CommonName
	inter := x509.NewCertPool()
	for _, r := range raw[1:] {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return cn, fmt.Errorf("client chain: %w", err)
		}
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return cn, fmt.Errorf("certificate of %q not signed by the federation's CA: %w", cn, err)
	}
	sites, err := Sites(dir)
	if err != nil {
		return cn, err
	}
	if !slices.Contains(sites, cn) || IsOperator(leaf) {
		return cn, fmt.Errorf("unknown site %q", cn)
	}
	if err := checkRevoked(dir, leaf); err != nil {
		return cn, fmt.Errorf("site %q: %w", cn, err)
	}
	return cn, nil
}

// SiteTLS returns site name's mTLS configuration: TLS 1.3 only, its client
// certificate, and the federation's CA as the only root. serverName is the
// coordinator's host name as in its certificate ("" means "localhost").
func SiteTLS(dir, name, serverName string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, SitesDir, name+".crt"), filepath.Join(dir, SitesDir, name+".key"))
	if err != nil {
		return nil, fmt.Errorf("certs: site %q certificate: %w", name, err)
	}
	pool, err := caPool(dir)
	if err != nil {
		return nil, err
	}
	if serverName == "" {
		serverName = "localhost"
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ServerName:   serverName,
	}, nil
}

// ServerOnlyTLS returns a TLS 1.3 configuration with the coordinator's
// certificate and no client authentication (the dashboard and metrics).
func ServerOnlyTLS(dir string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, CoordinatorFile), filepath.Join(dir, CoordinatorKey))
	if err != nil {
		return nil, fmt.Errorf("certs: coordinator certificate: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}, nil
}

// CAPool returns a pool holding the federation's CA.
func CAPool(dir string) (*x509.CertPool, error) { return caPool(dir) }

func caPool(dir string) (*x509.CertPool, error) {
	path := filepath.Join(dir, CAFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("certs: %s: no PEM certificate", path)
	}
	return pool, nil
}

func loadCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, nil, fmt.Errorf("certs: CA: %w", err)
	}
	ca, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("certs: %s: %w", CAFile, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("certs: %s: not an ECDSA key", CAKeyFile)
	}
	return ca, key, nil
}

// leaf is the template of a certificate the CA issues to subject for usage
// (server or client authentication), valid from an hour before now for
// validity.
func leaf(subject pkix.Name, now time.Time, usage x509.ExtKeyUsage) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber: serial(),
		Subject:      subject,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
}

func issueSite(dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	tmpl := leaf(pkix.Name{CommonName: name}, time.Now(), x509.ExtKeyUsageClientAuth)
	return issue(filepath.Join(dir, SitesDir), name+".crt", name+".key", tmpl, ca, caKey)
}

func issue(dir, certFile, keyFile string, tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("certs: %s key: %w", certFile, err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("certs: %s: %w", certFile, err)
	}
	return writePair(dir, certFile, keyFile, der, key)
}

func writePair(dir, certFile, keyFile string, der []byte, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("certs: %s: %w", keyFile, err)
	}
	if err := os.WriteFile(filepath.Join(dir, keyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, certFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		// crypto/rand never fails on supported platforms
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// checkNames accepts distinct names of letters, digits, '.', '_' and '-'.
func checkNames(names []string) error {
	seen := map[string]bool{}
	for _, n := range names {
		if n == "" || n == CoordinatorCN || strings.Trim(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" || strings.HasPrefix(n, ".") {
			return fmt.Errorf("bad site name %q (letters, digits, '.', '_' and '-' only)", n)
		}
		if seen[n] {
			return fmt.Errorf("site %q listed twice", n)
		}
		seen[n] = true
	}
	return nil
}

func writeLines(path string, lines []string) error {
	var sb strings.Builder
	for _, l := range lines {
		sb.WriteString(l + "\n")
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	return nil
}

func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}
