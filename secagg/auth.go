package secagg

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Identity is a site's long-term signing identity: its certificate (DER,
// issued by the federation's CA; the site's TLS client certificate) and the
// certificate's private key. A site with an Identity signs its round
// advertisement and the survivor set it is shown.
type Identity struct {
	Cert []byte
	Key  crypto.Signer
}

// Authority is what a site checks its peers' identities against: the
// federation's CA and, when the site knows it, the site list.
type Authority struct {
	// Roots holds the federation's CA; an advertisement's certificate
	// must chain to it, for client authentication.
	Roots *x509.CertPool
	// Names, when known (sites.txt), is the site name of each client ID:
	// the advertisement of client id must be signed by a certificate whose
	// Common Name is Names[id], and a round naming an id outside Names is
	// refused. Without Names the sites' certificates must only be distinct.
	Names []string
	// Check, when set, refuses a certificate for a reason of the caller's
	// (an operator's certificate, a revoked one).
	Check func(*x509.Certificate) error
	// Now is the time certificates are checked at (nil: time.Now).
	Now func() time.Time
}

// ErrUnauthenticated is wrapped by every refusal of an advertisement or a
// survivor-set signature whose signature or certificate does not hold.
var ErrUnauthenticated = errors.New("not authenticated")

// verifyCert checks that der is a certificate of the federation's CA for
// client authentication, acceptable to Check, and, when Names is known,
// that its Common Name is client id's name. It returns the certificate.
func (a *Authority) verifyCert(der []byte, id int) (*x509.Certificate, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("site %d's certificate: %w: %w", id, ErrUnauthenticated, err)
	}
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	cn := cert.Subject.CommonName
	if _, err := cert.Verify(x509.VerifyOptions{Roots: a.Roots, CurrentTime: now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("site %d's certificate (%q) is not the federation CA's: %w: %w", id, cn, ErrUnauthenticated, err)
	}
	if a.Check != nil {
		if err := a.Check(cert); err != nil {
			return nil, fmt.Errorf("site %d's certificate (%q): %w: %w", id, cn, ErrUnauthenticated, err)
		}
	}
	if a.Names != nil {
		if id < 0 || id >= len(a.Names) {
			return nil, fmt.Errorf("client %d is not in the site list (%d sites): %w", id, len(a.Names), ErrUnauthenticated)
		}
		if a.Names[id] != cn {
			return nil, fmt.Errorf("client %d is site %q, but its advertisement is signed by %q's certificate: %w", id, a.Names[id], cn, ErrUnauthenticated)
		}
	}
	return cert, nil
}

// checkSites refuses a round whose sites are not all in Names (when known).
func (a *Authority) checkSites(sites []int) error {
	if a == nil || a.Names == nil {
		return nil
	}
	for _, id := range sites {
		if id < 0 || id >= len(a.Names) {
			return fmt.Errorf("the round names client %d, which is not in the site list (%d sites)", id, len(a.Names))
		}
	}
	return nil
}

// signMsg signs msg with key: ECDSA and RSA (PKCS #1 v1.5) over SHA-256,
// Ed25519 over msg itself.
func signMsg(key crypto.Signer, msg []byte) ([]byte, error) {
	if _, ok := key.Public().(ed25519.PublicKey); ok {
		return key.Sign(rand.Reader, msg, crypto.Hash(0))
	}
	d := sha256.Sum256(msg)
	return key.Sign(rand.Reader, d[:], crypto.SHA256)
}

// verifySig checks sig over msg with cert's public key (as signMsg makes it).
func verifySig(cert *x509.Certificate, msg, sig []byte) error {
	var algo x509.SignatureAlgorithm
	switch cert.PublicKey.(type) {
	case *ecdsa.PublicKey:
		algo = x509.ECDSAWithSHA256
	case *rsa.PublicKey:
		algo = x509.SHA256WithRSA
	case ed25519.PublicKey:
		algo = x509.PureEd25519
	default:
		return fmt.Errorf("certificate key of type %T", cert.PublicKey)
	}
	return cert.CheckSignature(algo, msg, sig)
}

// digest binds a signature to the round: the session, the federation
// round, the sites, the graph, the threshold, the input length and the
// quantiser. A site that verifies a neighbour's signature knows that the
// neighbour was shown the same round.
func (c *Config) digest() [32]byte {
	h := sha256.New()
	h.Write([]byte("pfedmma/secagg/round\x00"))
	h.Write(c.Session[:])
	var b []byte
	b = binary.LittleEndian.AppendUint64(b, uint64(c.Round))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(c.Sites)))
	for _, id := range c.Sites {
		b = binary.LittleEndian.AppendUint64(b, uint64(id))
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(c.Degree))
	b = binary.LittleEndian.AppendUint64(b, uint64(c.Threshold))
	b = binary.LittleEndian.AppendUint64(b, uint64(c.Length))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(c.Quant.Clip))
	b = binary.LittleEndian.AppendUint64(b, uint64(c.Quant.ScaleBits))
	h.Write(b)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// advertSigned is the message a site signs in round 0 (the domain prefix
// keeps it apart from TLS 1.3's CertificateVerify content, which starts
// with 64 spaces, and from the survivor-set message).
func (c *Config) advertSigned(a Advertise) []byte {
	d := c.digest()
	b := append([]byte("pfedmma/secagg/advertise\x00"), d[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(a.From))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(a.MaskKey)))
	b = append(b, a.MaskKey...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(a.EncKey)))
	b = append(b, a.EncKey...)
	return append(b, a.Commit[:]...)
}

// survivorsSigned is the message a site signs in the consistency round.
func (c *Config) survivorsSigned(from int, survivors []int) []byte {
	d := c.digest()
	b := append([]byte("pfedmma/secagg/survivors\x00"), d[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(from))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(survivors)))
	for _, id := range survivors {
		b = binary.LittleEndian.AppendUint64(b, uint64(id))
	}
	return b
}

// Authenticate makes the client sign its advertisement and survivor set
// with me, and refuse peers whose signatures do not verify against auth. It
// must be called before Advertise. A client never authenticated signs
// nothing and checks nothing: it trusts the server to relay keys unaltered
// (an honest-but-curious server only; see the threat model).
func (c *Client) Authenticate(me Identity, auth Authority) error {
	if c.phase != phaseAdvertise {
		return fmt.Errorf("secagg: site %d: Authenticate after the round began", c.id)
	}
	if me.Key == nil || len(me.Cert) == 0 || auth.Roots == nil {
		return fmt.Errorf("secagg: site %d: an identity needs a certificate, its key and the CA", c.id)
	}
	if err := auth.checkSites(c.cfg.Sites); err != nil {
		return fmt.Errorf("secagg: site %d: %w", c.id, err)
	}
	cert, err := auth.verifyCert(me.Cert, c.id)
	if err != nil {
		return fmt.Errorf("secagg: site %d's own identity: %w", c.id, err)
	}
	probe := []byte("pfedmma/secagg/probe\x00")
	sig, err := signMsg(me.Key, probe)
	if err == nil {
		err = verifySig(cert, probe, sig)
	}
	if err != nil {
		return fmt.Errorf("secagg: site %d: the key does not sign for its certificate %q: %w", c.id, cert.Subject.CommonName, err)
	}
	c.me, c.auth, c.certs = &me, &auth, map[int]*x509.Certificate{}
	return nil
}

// verifyAdverts checks every relayed advertisement's certificate and
// signature (an authenticated client), and that no certificate signs for
// two sites. It keeps each site's certificate for the consistency round.
func (c *Client) verifyAdverts(adv []Advertise) error {
	if c.auth == nil {
		return nil
	}
	byName := map[string]int{}
	for _, a := range adv {
		if len(a.Cert) == 0 || len(a.Sig) == 0 {
			return fmt.Errorf("site %d's keys are not signed: %w (the coordinator relayed unsigned keys; this site requires signed ones)", a.From, ErrUnauthenticated)
		}
		cert, err := c.auth.verifyCert(a.Cert, a.From)
		if err != nil {
			return err
		}
		if err := verifySig(cert, c.cfg.advertSigned(a), a.Sig); err != nil {
			return fmt.Errorf("site %d's (%q) keys do not match its signature (altered in relay, or signed for another round or participant set): %w: %w", a.From, cert.Subject.CommonName, ErrUnauthenticated, err)
		}
		cn := cert.Subject.CommonName
		if other, dup := byName[cn]; dup {
			return fmt.Errorf("sites %d and %d advertise keys with the same certificate name %q: %w", other, a.From, cn, ErrUnauthenticated)
		}
		byName[cn] = a.From
		c.certs[a.From] = cert
	}
	return nil
}

// Consistency is the consistency round's message: a survivor's signature
// over the survivor set it was shown (Bonawitz et al. 2017, §6).
type Consistency struct {
	From int
	Sig  []byte
}

// SignSurvivors takes the survivors the server names (the sites whose
// masked input arrived), checks them, and returns this site's signature
// over them. It refuses a list that is malformed, leaves this site out or
// is shorter than the threshold.
func (c *Client) SignSurvivors(survivors []int) (Consistency, error) {
	if err := c.step(phaseConsistency, "SignSurvivors"); err != nil {
		return Consistency{}, err
	}
	if err := c.checkSurvivors(survivors); err != nil {
		return Consistency{}, err
	}
	c.survivors = slices.Sorted(slices.Values(survivors))
	out := Consistency{From: c.id}
	if c.me != nil {
		sig, err := signMsg(c.me.Key, c.cfg.survivorsSigned(c.id, c.survivors))
		if err != nil {
			return Consistency{}, fmt.Errorf("secagg: site %d: signing the survivors: %w", c.id, err)
		}
		out.Sig = sig
	}
	return out, nil
}

// checkConsistency verifies the survivors' signatures over the set this
// site signed: at least the threshold of them, each from a survivor, none
// twice, each valid under the certificate of that site's advertisement.
func (c *Client) checkConsistency(sigs []Consistency) error {
	seen := map[int]bool{}
	for _, s := range sigs {
		if _, ok := slices.BinarySearch(c.survivors, s.From); !ok {
			return fmt.Errorf("a survivor-set signature from site %d, which is not a survivor", s.From)
		}
		if seen[s.From] {
			return fmt.Errorf("two survivor-set signatures from site %d", s.From)
		}
		seen[s.From] = true
		if c.auth == nil {
			continue
		}
		cert, ok := c.certs[s.From]
		if !ok {
			return fmt.Errorf("a survivor-set signature from site %d, which advertised no keys: %w", s.From, ErrUnauthenticated)
		}
		if err := verifySig(cert, c.cfg.survivorsSigned(s.From, c.survivors), s.Sig); err != nil {
			return fmt.Errorf("site %d (%q) signed another survivor set than %v (the coordinator showed sites different survivors): %w: %w",
				s.From, cert.Subject.CommonName, c.survivors, ErrUnauthenticated, err)
		}
	}
	if !seen[c.id] {
		return fmt.Errorf("the survivor-set signatures leave this site's own out")
	}
	if len(seen) < c.cfg.Threshold {
		return fmt.Errorf("%d survivors signed the survivor set, fewer than the threshold %d", len(seen), c.cfg.Threshold)
	}
	return nil
}
