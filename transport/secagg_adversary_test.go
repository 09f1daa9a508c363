package transport

import (
	"bytes"
	"crypto"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/secagg"
)

// syncLog is a site's log, kept for the test to read.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// siteLogs makes one kept log per site.
func siteLogs(n int) ([]*syncLog, func(i int) *slog.Logger) {
	logs := make([]*syncLog, n)
	for i := range logs {
		logs[i] = &syncLog{}
	}
	return logs, func(i int) *slog.Logger { return slog.New(slog.NewTextHandler(logs[i], nil)) }
}

// relayed records what an adversarial coordinator relayed to whom.
type relayed struct {
	mu   sync.Mutex
	seen map[int][]string
}

func (r *relayed) add(site int, what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[int][]string{}
	}
	r.seen[site] = append(r.seen[site], what)
}

func (r *relayed) got(site int, what string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.seen[site], what)
}

// TestSecureAggregationRefusesSwappedKeys (issue 34, finding 4): a
// coordinator that relays to site-0 the keys of sites 1 and 2 with its own
// encryption key in place of theirs (the attack that recovers site-0's
// update when keys are unsigned: secagg.TestKeySwapAttack) is refused by
// site-0 naming site 1: site-0 sends no share, so there is nothing to
// decrypt, and the round goes on without it.
func TestSecureAggregationRefusesSwappedKeys(t *testing.T) {
	evil, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var rel relayed
	tamper := func(site int, what string, payload []byte) []byte {
		rel.add(site, what)
		if site != 0 || what != "keys" {
			return payload
		}
		adv, err := secagg.UnmarshalAdvertiseList(payload)
		if err != nil {
			t.Error(err)
			return payload
		}
		for i := range adv {
			if adv[i].From != 0 {
				adv[i].EncKey = evil.PublicKey().Bytes()
			}
		}
		return secagg.MarshalAdvertiseList(adv)
	}
	logs, siteLog := siteLogs(3)
	f := startFed(t, fedOpts{n: 3, rounds: 1, fraction: 1, seed: 7, secure: true, tolerate: true, minFit: 2,
		secAggTamper: tamper, siteLog: siteLog})
	f.wait(t)
	if f.err != nil {
		t.Fatal(f.err)
	}
	log0 := logs[0].String()
	if !strings.Contains(log0, `site 1's (\"site-1\") keys do not match its signature`) {
		t.Errorf("site-0's log does not refuse site 1's keys:\n%s", log0)
	}
	if rel.got(0, "inbox") {
		t.Error("site-0 shared its keys under the coordinator's encryption key")
	}
	r0 := f.hist.Rounds[0]
	if !slices.Equal(r0.Participants, []int{1, 2}) || r0.Failures[0] == "" {
		t.Errorf("round 0: participants %v, failures %v; want sites 1 and 2, site 0 failed", r0.Participants, r0.Failures)
	}
}

// TestSecureAggregationRefusesSplitSurvivors (issue 34): a coordinator that
// shows site-2 the survivors {1, 2} while sites 0 and 1 are shown {0, 1, 2}
// is caught by the consistency round: every site finds a signature over
// another set and reveals nothing, and the round is not unmasked.
func TestSecureAggregationRefusesSplitSurvivors(t *testing.T) {
	tamper := func(site int, what string, payload []byte) []byte {
		if site != 2 || what != "survivors" {
			return payload
		}
		return secagg.MarshalSurvivors([]int{1, 2})
	}
	logs, siteLog := siteLogs(3)
	f := startFed(t, fedOpts{n: 3, rounds: 1, fraction: 1, seed: 7, secure: true, secAggTamper: tamper, siteLog: siteLog})
	f.wait(t)
	if f.err == nil {
		t.Fatal("the federation finished: the coordinator unmasked a round in which it showed sites different survivors")
	}
	for i, l := range logs {
		s := l.String()
		// sites 0 and 1 find site 2's signature over another set; site 2
		// finds signatures from site 0, which it was told did not survive
		want := `site 2 (\"site-2\") signed another survivor set than [0 1 2]`
		if i == 2 {
			want = "a survivor-set signature from site 0, which is not a survivor"
		}
		if !strings.Contains(s, "consistency check failed") || !strings.Contains(s, want) {
			t.Errorf("site-%d's log does not refuse the survivor sets (%s):\n%s", i, want, s)
		}
	}
	t.Logf("coordinator: %v", f.err)
}

// TestSecureAggregationRefusesParticipants (issue 34): a round whose
// participant list names a client outside sites.txt, or has fewer sites than
// a site's minimum, is refused by the site before it sends any key.
func TestSecureAggregationRefusesParticipants(t *testing.T) {
	for _, tc := range []struct {
		name     string
		tamper   func(site int, what string, payload []byte) []byte
		minSites int
		want     string
	}{
		{"fake id", func(site int, what string, payload []byte) []byte {
			if what == "sites" {
				return []byte(string(payload) + ",7")
			}
			return payload
		}, 0, "the round names client 7, which is not in the site list (3 sites)"},
		{"below the minimum", nil, 4, "the round lists 3 sites, fewer than this site's minimum 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rel relayed
			tamper := func(site int, what string, payload []byte) []byte {
				rel.add(site, what)
				if tc.tamper != nil {
					return tc.tamper(site, what, payload)
				}
				return payload
			}
			logs, siteLog := siteLogs(3)
			f := startFed(t, fedOpts{n: 3, rounds: 1, fraction: 1, seed: 7, secure: true, secAggTamper: tamper, siteLog: siteLog,
				secAggMinSites: tc.minSites})
			f.wait(t)
			if f.err == nil {
				t.Error("the federation finished")
			}
			for i, l := range logs {
				if s := l.String(); !strings.Contains(s, tc.want) {
					t.Errorf("site-%d's log does not say %q:\n%s", i, tc.want, s)
				}
				if rel.got(i, "keys") {
					t.Errorf("site-%d advertised keys", i)
				}
			}
		})
	}
}

// TestSecAggSiteRefusesOperatorAndRevoked: a coordinator whose operator
// holds an operator certificate named like a site ("site-1": the CA issued
// it, its CN is in sites.txt) signs keys for client 1 with it; a site
// refuses them (secAggSite's check), and refuses a revoked site's keys
// once revoked.txt names it.
func TestSecAggSiteRefusesOperatorAndRevoked(t *testing.T) {
	dir := t.TempDir()
	names := []string{"site-0", "site-1", "site-2"}
	if err := certs.Init(dir, names, nil); err != nil {
		t.Fatal(err)
	}
	if err := certs.AddOperator(dir, "site-1"); err != nil {
		t.Fatal(err)
	}
	pool, err := certs.CAPool(dir)
	if err != nil {
		t.Fatal(err)
	}
	identity := func(crt, key string) secagg.Identity {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, crt), filepath.Join(dir, key))
		if err != nil {
			t.Fatal(err)
		}
		return secagg.Identity{Cert: pair.Certificate[0], Key: pair.PrivateKey.(crypto.Signer)}
	}
	round := func(one secagg.Identity) error {
		sa, err := secAggSite(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := secagg.NewConfig([32]byte{1}, []int{0, 1, 2}, 4, secagg.Options{Round: 1})
		if err != nil {
			t.Fatal(err)
		}
		var cs []*secagg.Client
		var adv []secagg.Advertise
		for id := range 3 {
			c, _ := secagg.NewClient(cfg, id, nil)
			auth := secagg.Authority{Roots: pool, Names: sa.Names, Check: sa.Check}
			me := identity(filepath.Join(certs.SitesDir, names[id]+".crt"), filepath.Join(certs.SitesDir, names[id]+".key"))
			if id != 0 {
				auth = secagg.Authority{Roots: pool} // only site 0 is under test
			}
			if id == 1 {
				me = one // the coordinator's own client
			}
			if err := c.Authenticate(me, auth); err != nil {
				t.Fatal(err)
			}
			a, err := c.Advertise()
			if err != nil {
				t.Fatal(err)
			}
			cs, adv = append(cs, c), append(adv, a)
		}
		_, err = cs[0].ShareKeys(adv)
		return err
	}
	site1 := identity(filepath.Join(certs.SitesDir, "site-1.crt"), filepath.Join(certs.SitesDir, "site-1.key"))
	if err := round(site1); err != nil {
		t.Fatalf("site-1's own keys: %v", err)
	}
	op := identity(filepath.Join(certs.OperatorsDir, "site-1.crt"), filepath.Join(certs.OperatorsDir, "site-1.key"))
	if err := round(op); err == nil || !strings.Contains(err.Error(), `site 1's certificate ("site-1"): not authenticated: an operator's certificate`) {
		t.Errorf("keys signed with an operator's certificate: %v, want refused", err)
	}
	if err := certs.Revoke(dir, "site-2"); err != nil {
		t.Fatal(err)
	}
	if err := round(site1); err == nil || !strings.Contains(err.Error(), `site "site-2" is revoked`) {
		t.Errorf("a revoked site's keys: %v, want refused", err)
	}
}
