package certs

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The revocation list, revoked.txt, holds one entry a line ('#' starts a
// comment, blank lines are skipped):
//
//	serial:HEX [NAME]   the certificate with this serial number (hex, as
//	                    `openssl x509 -noout -serial` prints it; colons
//	                    and case ignored)
//	sha256:HEX [NAME]   the certificate with this SHA-256 fingerprint (of
//	                    its DER, as `openssl x509 -noout -fingerprint
//	                    -sha256` prints it)
//	NAME                every certificate of site NAME (lists written
//	                    before revocation by certificate): the name is
//	                    banned until the line is removed
//
// NAME after a serial or fingerprint records whose certificate it was: a
// site, or operator:NAME. A site whose certificate is revoked by serial or
// fingerprint can be re-keyed (Rekey): its new certificate is accepted.
// Revocation applies to site and operator certificates alike.

// Revocations is a parsed revocation list.
type Revocations struct {
	// Serials and Fingerprints map a revoked certificate's normalized
	// serial (lower-case hex, no leading zeros) or SHA-256 fingerprint
	// (lower-case hex) to the name noted with it ("" when none).
	Serials, Fingerprints map[string]string
	// Names are the sites revoked by name (every certificate of theirs).
	Names map[string]bool
}

// Revokes reports whether c is revoked, and why (for the logs).
func (r *Revocations) Revokes(c *x509.Certificate) (bool, string) {
	if r == nil || c == nil {
		return false, ""
	}
	if _, ok := r.Serials[SerialHex(c)]; ok {
		return true, "certificate serial " + SerialHex(c) + " is revoked"
	}
	if _, ok := r.Fingerprints[Fingerprint(c)]; ok {
		return true, "certificate fingerprint sha256:" + Fingerprint(c) + " is revoked"
	}
	if !IsOperator(c) && r.Names[c.Subject.CommonName] {
		return true, fmt.Sprintf("site %q is revoked (by name, every certificate)", c.Subject.CommonName)
	}
	return false, ""
}

// Noted returns the site names noted with revoked serials or fingerprints
// (operators excluded): sites whose certificate, at least one, is revoked.
func (r *Revocations) Noted() map[string]bool {
	out := map[string]bool{}
	for _, m := range []map[string]string{r.Serials, r.Fingerprints} {
		for _, n := range m {
			if n != "" && !strings.HasPrefix(n, "operator:") {
				out[n] = true
			}
		}
	}
	return out
}

// Fingerprint is the lower-case hex SHA-256 of c's DER encoding.
func Fingerprint(c *x509.Certificate) string {
	s := sha256.Sum256(c.Raw)
	return hex.EncodeToString(s[:])
}

// SerialHex is c's serial number in lower-case hex without leading zeros.
func SerialHex(c *x509.Certificate) string { return c.SerialNumber.Text(16) }

// normHex parses a serial or fingerprint as written in revoked.txt (or
// given to certs revoke): hex digits, colons and case ignored.
func normHex(s string, serial bool) (string, error) {
	h := strings.ToLower(strings.ReplaceAll(s, ":", ""))
	if h == "" || strings.Trim(h, "0123456789abcdef") != "" {
		return "", fmt.Errorf("%q is not hexadecimal", s)
	}
	if serial {
		n, _ := new(big.Int).SetString(h, 16)
		return n.Text(16), nil
	}
	if len(h) != 64 {
		return "", fmt.Errorf("SHA-256 fingerprint %q has %d hex digits, want 64", s, len(h))
	}
	return h, nil
}

// ReadRevocations reads dir's revoked.txt (a missing file revokes
// nothing); a malformed line is an error naming the file and line.
func ReadRevocations(dir string) (*Revocations, error) {
	path := filepath.Join(dir, RevokedFile)
	r := &Revocations{Serials: map[string]string{}, Fingerprints: map[string]string{}, Names: map[string]bool{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	for i, line := range strings.Split(string(b), "\n") {
		if j := strings.IndexByte(line, '#'); j >= 0 {
			line = line[:j]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if err := r.add(f); err != nil {
			return nil, fmt.Errorf("certs: %s line %d: %w", path, i+1, err)
		}
	}
	return r, nil
}

func (r *Revocations) add(f []string) error {
	kind, val, ok := strings.Cut(f[0], ":")
	note := ""
	if len(f) > 1 {
		note = f[1]
	}
	switch {
	case ok && kind == "serial":
		h, err := normHex(val, true)
		if err != nil {
			return fmt.Errorf("serial: %w", err)
		}
		r.Serials[h] = note
	case ok && kind == "sha256":
		h, err := normHex(val, false)
		if err != nil {
			return fmt.Errorf("sha256: %w", err)
		}
		r.Fingerprints[h] = note
	case len(f) == 1 && !ok:
		r.Names[f[0]] = true
	default:
		return fmt.Errorf("%q: want serial:HEX [NAME], sha256:HEX [NAME] or a site name", strings.Join(f, " "))
	}
	return nil
}

// Revoked returns the sites revoked by name (an older list's lines, every
// certificate of theirs).
func Revoked(dir string) (map[string]bool, error) {
	r, err := ReadRevocations(dir)
	if err != nil {
		return nil, err
	}
	return r.Names, nil
}

// ReadCertificate reads a PEM certificate file.
func ReadCertificate(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("certs: %s: no PEM certificate", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: %s: %w", path, err)
	}
	return c, nil
}

// Revoke revokes site name's current certificate (sites/NAME.crt) by its
// serial number: the coordinator refuses it at the next handshake and cuts
// off a connected session within a second. The site keeps its client ID
// and can be re-keyed (Rekey).
func Revoke(dir, name string) error {
	sites, err := Sites(dir)
	if err != nil {
		return err
	}
	if !slices.Contains(sites, name) {
		return fmt.Errorf("certs revoke %s: unknown site %q", dir, name)
	}
	c, err := ReadCertificate(filepath.Join(dir, SitesDir, name+".crt"))
	if err != nil {
		return fmt.Errorf("certs revoke %s: site %q: %w (without it, revoke by --serial or --fingerprint)", dir, name, err)
	}
	return RevokeSerial(dir, SerialHex(c), name)
}

// RevokeOperator revokes operator name's certificate (operators/NAME.crt)
// by its serial number: the dashboard refuses it at the next handshake.
func RevokeOperator(dir, name string) error {
	c, err := ReadCertificate(filepath.Join(dir, OperatorsDir, name+".crt"))
	if err != nil {
		return fmt.Errorf("certs revoke --operator %s: %w", name, err)
	}
	return RevokeSerial(dir, SerialHex(c), "operator:"+name)
}

// RevokeSerial adds serial (hex) to revoked.txt, noting whose certificate
// it is (may be empty).
func RevokeSerial(dir, serial, note string) error {
	h, err := normHex(serial, true)
	if err != nil {
		return fmt.Errorf("certs revoke: --serial: %w", err)
	}
	return appendEntry(dir, "serial:"+h, note, func(r *Revocations) bool { _, ok := r.Serials[h]; return ok })
}

// RevokeFingerprint adds a SHA-256 certificate fingerprint (hex) to
// revoked.txt, noting whose certificate it is (may be empty).
func RevokeFingerprint(dir, fp, note string) error {
	h, err := normHex(fp, false)
	if err != nil {
		return fmt.Errorf("certs revoke: --fingerprint: %w", err)
	}
	return appendEntry(dir, "sha256:"+h, note, func(r *Revocations) bool { _, ok := r.Fingerprints[h]; return ok })
}

func appendEntry(dir, entry, note string, has func(*Revocations) bool) error {
	r, err := ReadRevocations(dir)
	if err != nil {
		return err
	}
	if has(r) {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(dir, RevokedFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("certs revoke: %w", err)
	}
	if _, err := fmt.Fprintln(f, strings.TrimSpace(entry+" "+note)); err != nil {
		f.Close()
		return fmt.Errorf("certs revoke: %w", err)
	}
	return f.Close()
}

// Rekey gives site name a new certificate (sites/NAME.crt and .key, same
// client ID): its current certificate is revoked by serial first, and a
// line revoking the site by name (an older list's) is removed, so that the
// new certificate is accepted.
func Rekey(dir, name string) error {
	if err := Revoke(dir, name); err != nil {
		return err
	}
	if err := dropNameLine(dir, name); err != nil {
		return err
	}
	ca, caKey, err := loadCA(dir)
	if err != nil {
		return err
	}
	return issueSite(dir, name, ca, caKey)
}

// dropNameLine removes the lines of revoked.txt that revoke site name by
// name.
func dropNameLine(dir, name string) error {
	path := filepath.Join(dir, RevokedFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("certs rekey: %w", err)
	}
	var keep []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		body, _, _ := strings.Cut(l, "#")
		if strings.TrimSpace(body) != name {
			keep = append(keep, l)
		}
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(keep, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("certs rekey: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("certs rekey: %w", err)
	}
	return nil
}

// checkRevoked refuses a revoked certificate (re-reading revoked.txt).
func checkRevoked(dir string, c *x509.Certificate) error {
	r, err := ReadRevocations(dir)
	if err != nil {
		return err
	}
	if bad, why := r.Revokes(c); bad {
		return errors.New(why)
	}
	return nil
}
