package certs

import "fmt"

// The long help of the `pfedmma certs` subcommands.
const (
	// InitHelp is the long help of `certs init`.
	InitHelp = "Makes, in --dir, a CA (ca.crt, ca.key: keep the key offline), a coordinator certificate for\n" +
		"localhost, 127.0.0.1, ::1 and every --host, and one client certificate per site under sites/.\n" +
		"A site's identity is its certificate's CN; the i-th site of --sites is client ID i (sites.txt).\n" +
		"Give each site ca.crt, sites.txt (it finds its client ID there) and its own sites/<name>.crt and .key."

	// RevokeHelp is the long help of `certs revoke`.
	RevokeHelp = `Revoke a certificate by adding it to D/revoked.txt, which the coordinator re-reads every second
and at every handshake (sites and the dashboard alike): a connected site is cut off within a
second, and an upload it is sending is discarded.
  NAME                 site NAME's certificate D/sites/NAME.crt (by its serial number)
  --operator NAME      operator NAME's certificate D/operators/NAME.crt
  --serial HEX         any certificate by serial number (openssl x509 -noout -serial)
  --fingerprint HEX    any certificate by SHA-256 fingerprint (openssl x509 -noout -fingerprint -sha256)
A site whose certificate is revoked keeps its client ID and can be given a new one with
'pfedmma certs rekey'. revoked.txt holds one entry a line: serial:HEX [NAME], sha256:HEX [NAME],
or (lists of older versions) a bare site name, which revokes every certificate of that site.`

	// RekeyHelp is the long help of `certs rekey`.
	RekeyHelp = `Revoke site NAME's current certificate (by serial) and issue a new sites/NAME.crt and .key
with the same client ID. Give the site the new pair: it registers again and rejoins the
federation's schedule. A line of revoked.txt revoking NAME by name (older lists) is removed.`

	// AddOperatorHelp is the long help of `certs add-operator`.
	AddOperatorHelp = `Issue an operator certificate, signed by the federation's CA, as operators/NAME.crt and
operators/NAME.key in the certificates folder. The coordinator's dashboard, /api/status and
/metrics (pfedmma serve --http) answer only clients presenting such a certificate, or the
bearer token of --http-token-file. With curl:
  curl --cacert D/ca.crt --cert D/operators/NAME.crt --key D/operators/NAME.key https://HOST:7444/api/status
A browser needs them as a PKCS#12 bundle:
  openssl pkcs12 -export -in D/operators/NAME.crt -inkey D/operators/NAME.key -out NAME.p12`
)

// RevokeTarget is what `certs revoke` revokes: exactly one of a site's
// Name (with Operator, an operator's), a Serial or a Fingerprint.
type RevokeTarget struct {
	Name, Serial, Fingerprint string
	Operator                  bool
}

// RevokeAny revokes t's certificate in dir and returns what it revoked, in
// words ("operator NAME", "serial HEX", ...); t must name exactly one.
func RevokeAny(dir string, t RevokeTarget) (string, error) {
	given := 0
	for _, g := range []bool{t.Name != "", t.Serial != "", t.Fingerprint != ""} {
		if g {
			given++
		}
	}
	if given != 1 || (t.Operator && t.Name == "") {
		return "", fmt.Errorf("certs revoke: give one of NAME (a site; with --operator an operator), --serial or --fingerprint")
	}
	switch {
	case t.Operator:
		return "operator " + t.Name, RevokeOperator(dir, t.Name)
	case t.Name != "":
		return t.Name, Revoke(dir, t.Name)
	case t.Serial != "":
		return "serial " + t.Serial, RevokeSerial(dir, t.Serial, "")
	}
	return "fingerprint " + t.Fingerprint, RevokeFingerprint(dir, t.Fingerprint, "")
}
