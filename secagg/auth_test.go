package secagg

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"math"
	"math/big"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// pki is a federation's CA and one certificate per site, made here (an
// oracle outside package certs and outside the code under test).
type pki struct {
	roots *x509.CertPool
	names []string
	ids   []Identity
}

func newPKI(t testing.TB, names ...string) *pki {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p := &pki{roots: x509.NewCertPool(), names: names}
	p.roots.AddCert(ca)
	for i, n := range names {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: n}, NotBefore: now.Add(-time.Hour),
			NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		p.ids = append(p.ids, Identity{Cert: der, Key: k})
	}
	return p
}

func (p *pki) authority(withNames bool) Authority {
	a := Authority{Roots: p.roots}
	if withNames {
		a.Names = p.names
	}
	return a
}

// authRound is a round of sites 0..n-1 whose clients are authenticated
// with p (p nil: unauthenticated, the code before signatures).
func authRound(t *testing.T, p *pki, n int, withNames bool) *round {
	t.Helper()
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	cfg, err := NewConfig(session("auth"), ids, 4, Options{Round: 3})
	if err != nil {
		t.Fatal(err)
	}
	r := newRound(t, cfg)
	if p != nil {
		for id, c := range r.clients {
			if err := c.Authenticate(p.ids[id], p.authority(withNames)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return r
}

// advertiseAll runs round 0 and returns the list the server would relay.
func advertiseAll(t *testing.T, r *round) []Advertise {
	t.Helper()
	for _, id := range r.cfg.Sites {
		a, err := r.clients[id].Advertise()
		if err != nil {
			t.Fatal(err)
		}
		if err := r.srv.ReceiveAdvertise(a); err != nil {
			t.Fatal(err)
		}
	}
	adv, err := r.srv.KeysDone()
	if err != nil {
		t.Fatal(err)
	}
	adv, err = UnmarshalAdvertiseList(MarshalAdvertiseList(adv))
	if err != nil {
		t.Fatal(err)
	}
	return adv
}

// TestAuthenticatedRoundEqualsFedAvg: signatures change nothing in the
// result (bit-identical to Quantizer.Aggregate), with and without the site
// list.
func TestAuthenticatedRoundEqualsFedAvg(t *testing.T) {
	p := newPKI(t, "site-a", "site-b", "site-c", "site-d")
	for _, withNames := range []bool{true, false} {
		r := authRound(t, p, 4, withNames)
		xs, ws := inputs(randFor(7), r.cfg.Sites, r.cfg.Length, 3)
		res, err := r.run(xs, ws, map[int]bool{2: true})
		if err != nil {
			t.Fatalf("names %v: %v", withNames, err)
		}
		checkResult(t, r.cfg, res, xs, ws, []int{0, 1, 3})
	}
}

// victim is site 0's update in the key-swap attack (the numbers).
var victim = []float32{0.125, -3.5, 42, 0.001}

const victimWeight = 7

// keySwapAttack is a malicious coordinator against site 0 of a 3-site round
// (t = 2): in the keys it relays to site 0 it replaces the encryption keys
// of sites 1 and 2 by its own, decrypts the shares site 0 sends them (both
// its mask key and its self-mask seed), and unmasks site 0's masked input.
// It returns what it recovered (the decoded update and weight), or the
// error with which site 0 refused.
func keySwapAttack(t *testing.T, r *round) ([]float64, uint64, error) {
	t.Helper()
	adv := advertiseAll(t, r)
	evil, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	forged := slices.Clone(adv)
	for i := range forged {
		if forged[i].From != 0 {
			forged[i].EncKey = evil.PublicKey().Bytes()
		}
	}
	c0 := r.clients[0]
	sh0, err := c0.ShareKeys(forged)
	if err != nil {
		return nil, 0, err
	}
	for _, id := range []int{1, 2} {
		sh, err := r.clients[id].ShareKeys(adv)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.srv.ReceiveShares(id, sh); err != nil {
			t.Fatal(err)
		}
	}
	// site 0's inbox: the honest sites' shares for it are sealed under the
	// keys site 0 was not shown; the coordinator forges shares of its own
	// under the keys it relayed
	seal := func(from int) cipher.AEAD {
		pub, _ := ecdh.X25519().NewPublicKey(adv[0].EncKey)
		shared, err := evil.ECDH(pub)
		if err != nil {
			t.Fatal(err)
		}
		key := kdf("enc", r.cfg.Session, from, 0, shared)
		block, _ := aes.NewCipher(key[:])
		aead, _ := cipher.NewGCM(block)
		return aead
	}
	var inbox []EncryptedShare
	for _, id := range []int{1, 2} {
		pt := make([]byte, plainSize)
		binary.LittleEndian.PutUint64(pt[0:], uint64(id))
		aead := seal(id)
		inbox = append(inbox, EncryptedShare{From: id, To: 0, Ciphertext: aead.Seal(nil, make([]byte, aead.NonceSize()), pt, nil)})
	}
	m, _, err := c0.MaskInput(inbox, victim, victimWeight)
	if err != nil {
		t.Fatal(err)
	}
	// the coordinator decrypts site 0's shares meant for sites 1 and 2
	var xs []uint64
	var keyShares, seedShares []Share
	for _, e := range sh0 {
		pub, _ := ecdh.X25519().NewPublicKey(adv[0].EncKey)
		shared, err := evil.ECDH(pub)
		if err != nil {
			t.Fatal(err)
		}
		key := kdf("enc", r.cfg.Session, 0, e.To, shared)
		block, _ := aes.NewCipher(key[:])
		aead, _ := cipher.NewGCM(block)
		pt, err := aead.Open(nil, make([]byte, aead.NonceSize()), e.Ciphertext, nil)
		if err != nil {
			t.Fatalf("the coordinator cannot decrypt site 0's share for site %d: %v", e.To, err)
		}
		xs = append(xs, r.cfg.x(e.To))
		keyShares = append(keyShares, getShare(pt[16:]))
		seedShares = append(seedShares, getShare(pt[16+8*limbs:]))
	}
	keySecret, err := combine(xs, keyShares)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := combine(xs, seedShares)
	if err != nil {
		t.Fatal(err)
	}
	if commit(r.cfg.Session, 0, seed) != adv[0].Commit {
		t.Fatal("the recovered self-mask seed does not match site 0's commitment")
	}
	sk, err := ecdh.X25519().NewPrivateKey(keySecret[:])
	if err != nil {
		t.Fatal(err)
	}
	y := slices.Clone(m.Y)
	addMask(y, seed, -1)
	for _, a := range adv[1:] {
		pk, _ := ecdh.X25519().NewPublicKey(a.MaskKey)
		shared, _ := sk.ECDH(pk)
		addMask(y, pairSeed(r.cfg.Session, 0, a.From, shared), -sign(0, a.From))
	}
	mean, w, err := r.cfg.Quant.Decode(y)
	if err != nil {
		t.Fatal(err)
	}
	return mean, w, nil
}

// TestKeySwapAttack (issue 34, finding 4): without signatures a coordinator
// that swaps the neighbours' encryption keys recovers site 0's update
// exactly (bit for bit what the site quantised, weight 7); with signatures
// site 0 refuses the relayed keys, naming the site whose key was swapped,
// and sends nothing.
func TestKeySwapAttack(t *testing.T) {
	mean, w, err := keySwapAttack(t, authRound(t, nil, 3, false))
	if err != nil {
		t.Fatalf("unauthenticated site refused: %v", err)
	}
	want, _ := Quantizer{Clip: DefaultClip, ScaleBits: DefaultScaleBits}.Aggregate([][]float32{victim}, []uint64{victimWeight})
	if w != victimWeight || !slices.Equal(mean, want) {
		t.Fatalf("the attack recovered %v weight %d, want %v weight 7 (the reproduction of the issue failed)", mean, w, want)
	}
	t.Logf("unauthenticated: the coordinator recovered %v, weight %d", mean, w)

	p := newPKI(t, "site-a", "site-b", "site-c")
	for _, withNames := range []bool{true, false} {
		mean, w, err = keySwapAttack(t, authRound(t, p, 3, withNames))
		if err == nil {
			t.Fatalf("names %v: the authenticated site accepted swapped keys; the coordinator recovered %v weight %d", withNames, mean, w)
		}
		if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), `site 1's ("site-b") keys do not match its signature`) {
			t.Errorf("names %v: refusal %q, want one naming site 1 (site-b) and its signature", withNames, err)
		}
	}
}

// TestForgedAdvertisements: every way a coordinator without the CA key can
// pass off keys as a site's is refused, naming the site.
func TestForgedAdvertisements(t *testing.T) {
	p := newPKI(t, "site-a", "site-b", "site-c")
	other := newPKI(t, "site-a", "site-b", "site-c") // another CA: the coordinator's own
	cases := []struct {
		name      string
		withNames bool
		forge     func(adv []Advertise) []Advertise
		want      string
	}{
		{"unsigned", true, func(adv []Advertise) []Advertise {
			adv[1].Sig, adv[1].Cert = nil, nil
			return adv
		}, "site 1's keys are not signed"},
		{"mask key swapped", true, func(adv []Advertise) []Advertise {
			k, _ := ecdh.X25519().GenerateKey(rand.Reader)
			adv[2].MaskKey = k.PublicKey().Bytes()
			return adv
		}, `site 2's ("site-c") keys do not match its signature`},
		{"commitment swapped", true, func(adv []Advertise) []Advertise {
			adv[2].Commit[0] ^= 1
			return adv
		}, `site 2's ("site-c") keys do not match`},
		{"another CA", true, func(adv []Advertise) []Advertise {
			adv[1].Cert = other.ids[1].Cert
			adv[1].Sig, _ = signMsg(other.ids[1].Key, authCfg(t).advertSigned(adv[1]))
			return adv
		}, `site 1's certificate ("site-b") is not the federation CA's`},
		{"site-c's certificate for site 1 (sites.txt)", true, func(adv []Advertise) []Advertise {
			adv[1].Cert = p.ids[2].Cert
			adv[1].Sig, _ = signMsg(p.ids[2].Key, authCfg(t).advertSigned(adv[1]))
			return adv
		}, `client 1 is site "site-b", but its advertisement is signed by "site-c"'s certificate`},
		{"site-c's certificate for site 1 (no sites.txt)", false, func(adv []Advertise) []Advertise {
			adv[1].Cert = p.ids[2].Cert
			adv[1].Sig, _ = signMsg(p.ids[2].Key, authCfg(t).advertSigned(adv[1]))
			return adv
		}, `sites 1 and 2 advertise keys with the same certificate name "site-c"`},
		{"signed for another participant set", true, func(adv []Advertise) []Advertise {
			cfg, _ := NewConfig(session("auth"), []int{0, 1, 2, 3}, 4, Options{Round: 3})
			adv[1].Sig, _ = signMsg(p.ids[1].Key, cfg.advertSigned(adv[1]))
			return adv
		}, `site 1's ("site-b") keys do not match its signature`},
	}
	for _, tc := range cases {
		r := authRound(t, p, 3, tc.withNames)
		adv := tc.forge(advertiseAll(t, r))
		_, err := r.clients[0].ShareKeys(adv)
		if err == nil || !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal containing %q", tc.name, err, tc.want)
		}
	}
}

// authCfg is authRound's configuration (the same digest).
func authCfg(t *testing.T) *Config {
	t.Helper()
	cfg, err := NewConfig(session("auth"), []int{0, 1, 2}, 4, Options{Round: 3})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// maskAll runs rounds 0 to 2 of an honest coordinator for r's sites.
func maskAll(t *testing.T, r *round) {
	t.Helper()
	adv := advertiseAll(t, r)
	for _, id := range r.cfg.Sites {
		sh, err := r.clients[id].ShareKeys(adv)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.srv.ReceiveShares(id, sh); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.srv.SharesDone(); err != nil {
		t.Fatal(err)
	}
	xs, ws := inputs(randFor(9), r.cfg.Sites, r.cfg.Length, 1)
	for _, id := range r.cfg.Sites {
		in, _ := r.srv.Inbox(id)
		m, _, err := r.clients[id].MaskInput(in, xs[id], ws[id])
		if err != nil {
			t.Fatal(err)
		}
		if err := r.srv.ReceiveMasked(m); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConsistencyRefusesSplitViews (Bonawitz et al. §6): the coordinator
// shows sites 0 and 1 the survivors {0, 1, 2} and site 2 the survivors
// {1, 2} (so that site 2 would reveal its share of site 0's mask key while
// site 1 reveals its share of site 0's self-mask seed). Each signs the set
// it was shown; site 2 refuses to unmask, naming site 1, which signed
// another set, or, shown only its own signature, because fewer than the
// threshold signed its set. Sites 0 and 1, shown the same set, unmask.
// Without signatures (the code before) site 2 reveals site 0's mask-key
// share.
func TestConsistencyRefusesSplitViews(t *testing.T) {
	p := newPKI(t, "site-a", "site-b", "site-c")
	split := func(r *round) (c0, c1, c2 Consistency) {
		var err error
		if c0, err = r.clients[0].SignSurvivors([]int{0, 1, 2}); err != nil {
			t.Fatal(err)
		}
		if c1, err = r.clients[1].SignSurvivors([]int{0, 1, 2}); err != nil {
			t.Fatal(err)
		}
		if c2, err = r.clients[2].SignSurvivors([]int{1, 2}); err != nil {
			t.Fatal(err)
		}
		return c0, c1, c2
	}
	r := authRound(t, p, 3, true)
	maskAll(t, r)
	c0, c1, c2 := split(r)
	_, err := r.clients[2].Unmask([]Consistency{c1, c2})
	if err == nil || !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), `site 1 ("site-b") signed another survivor set than [1 2]`) {
		t.Errorf("site 2 shown site 1's signature over {0, 1, 2}: %v, want a refusal naming site 1", err)
	}
	if _, err := r.clients[0].Unmask([]Consistency{c0, c1}); err != nil {
		t.Errorf("site 0 with consistent signatures: %v", err)
	}
	r = authRound(t, p, 3, true)
	maskAll(t, r)
	_, _, c2 = split(r)
	_, err = r.clients[2].Unmask([]Consistency{c2})
	wantErr(t, "site 2 shown only its own signature", err, "1 survivors signed the survivor set, fewer than the threshold 2")

	// unauthenticated (the code before): site 2 reveals site 0's mask-key
	// share although site 1 was told site 0 survived
	r = authRound(t, nil, 3, false)
	maskAll(t, r)
	r.clients[1].SignSurvivors([]int{0, 1, 2})
	c2, _ = r.clients[2].SignSurvivors([]int{1, 2})
	rv, err := r.clients[2].Unmask([]Consistency{{From: 1}, c2})
	if err != nil {
		t.Fatalf("unauthenticated site 2: %v", err)
	}
	if !slices.ContainsFunc(rv.Shares, func(s RevealedShare) bool { return s.Owner == 0 && s.Kind == MaskKey }) {
		t.Fatal("the unauthenticated reproduction did not reveal site 0's mask-key share")
	}
}

// TestRefusesBadParticipants (issue 34): a round naming a client outside
// the site list, a site twice, fewer sites than the site's minimum, or
// whose advertisers fall below it, is refused.
func TestRefusesBadParticipants(t *testing.T) {
	p := newPKI(t, "site-a", "site-b", "site-c")
	cfg, err := NewConfig(session("fake"), []int{0, 1, 7}, 4, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := NewClient(cfg, 0, nil)
	wantErr(t, "fake id", c.Authenticate(p.ids[0], p.authority(true)), "names client 7, which is not in the site list")
	_, err = NewConfig(session("twice"), []int{0, 0, 1}, 4, Options{})
	wantErr(t, "itself twice", err, "site 0 listed twice")

	cfg, _ = NewConfig(session("two"), []int{0, 1}, 4, Options{})
	c, _ = NewClient(cfg, 0, nil)
	wantErr(t, "below the minimum", c.RequireSites(3), "the round lists 2 sites, fewer than this site's minimum 3")

	// without the site list: a fake id that never advertises counts for
	// nothing against the minimum
	cfg, _ = NewConfig(session("ghost"), []int{0, 1, 99}, 4, Options{})
	r := newRound(t, cfg)
	for _, id := range []int{0, 1} {
		if err := r.clients[id].Authenticate(p.ids[id], p.authority(false)); err != nil {
			t.Fatal(err)
		}
		if err := r.clients[id].RequireSites(3); err != nil {
			t.Fatal(err)
		}
		a, _ := r.clients[id].Advertise()
		if err := r.srv.ReceiveAdvertise(a); err != nil {
			t.Fatal(err)
		}
	}
	adv, err := r.srv.KeysDone()
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.clients[0].ShareKeys(adv)
	wantErr(t, "ghost participant", err, "2 sites advertised keys, fewer than this site's minimum 3")
}

// TestWeightBound (issue 34, finding 9): the largest total weight is
// ⌊(2^63−1)/(C·2^s)⌋; two inputs {256, 1} at weight 2^30 each (total 2^31)
// are refused instead of decoding to [−256 1], and at the bound the sum
// decodes right.
func TestWeightBound(t *testing.T) {
	q := Quantizer{Clip: DefaultClip, ScaleBits: DefaultScaleBits}
	x := []float32{256, 1}
	got, err := q.Aggregate([][]float32{x, x}, []uint64{1 << 30, 1 << 30})
	if err == nil && !slices.Equal(got, []float64{256, 1}) {
		t.Fatalf("two inputs {256, 1} at weight 2^30 decode to %v", got)
	}
	if err == nil {
		t.Fatal("total weight 2^31 accepted")
	}
	maxW := uint64((1<<63 - 1) / (256 << 24))
	if maxW != 1<<31-1 {
		t.Fatalf("oracle: %d", maxW)
	}
	buf := make([]uint64, 3)
	if _, err := q.Encode(buf, x, maxW+1); err == nil {
		t.Error("Encode accepted weight 2^31")
	}
	for _, v := range []float32{256, -256} {
		got, err = q.Aggregate([][]float32{{v, 1}, {v, -1}}, []uint64{maxW - 5, 5})
		want := []float64{float64(v), float64(maxW-10) / float64(maxW)}
		if err != nil || got[0] != want[0] || math.Abs(got[1]-want[1]) > q.Bound() {
			t.Errorf("at the bound, %v: %v, %v; want %v", v, got, err, want)
		}
	}
	// a non-integer C·2^s
	q2 := Quantizer{Clip: 0.3, ScaleBits: 3}
	m := uint64(math.RoundToEven(0.3 * 8))
	if got := q2.maxTotalWeight(); got != (1<<63-1)/m {
		t.Errorf("clip 0.3, 3 bits: bound %d, want %d", got, (1<<63-1)/m)
	}
}

func randFor(seed uint64) *mrand.Rand { return mrand.New(mrand.NewPCG(seed, seed+1)) }
