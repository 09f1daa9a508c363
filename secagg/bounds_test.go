package secagg

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"testing"
)

// TestConfigBounds: the smallest valid settings are accepted (length 1,
// degree 2, scale bits 40) and the first invalid ones refused (dropout
// 0.5, a threshold of exactly half the holders, C·2^s = 2^62), with
// messages that name the limits.
func TestConfigBounds(t *testing.T) {
	s := session("bounds")
	if _, err := NewConfig(s, sites(3), 1, Options{}); err != nil {
		t.Errorf("length 1: %v", err)
	}
	_, err := NewConfig(s, sites(3), 0, Options{})
	wantErr(t, "length 0", err, "input length 0 must be positive")
	cfg, err := NewConfig(s, sites(10), 4, Options{Degree: 2})
	if err != nil || cfg.Degree != 2 || len(cfg.Neighbours(cfg.Sites[0])) != 2 {
		t.Errorf("degree 2: %v", err)
	}
	_, err = NewConfig(s, sites(10), 4, Options{Degree: 3})
	wantErr(t, "degree 3", err, "degree 3 must be even and at least 2 (or ≥ 9: the complete graph)")
	_, err = NewConfig(s, sites(10), 4, Options{Dropout: 0.5})
	wantErr(t, "dropout 0.5", err, "dropout 0.5 must be in (0, 0.5)")
	if _, err := NewConfig(s, sites(10), 4, Options{Dropout: 0.49}); err != nil {
		t.Errorf("dropout 0.49: %v", err)
	}
	// 10 sites, complete graph: 10 holders; t = 5 is half, refused
	_, err = NewConfig(s, sites(10), 4, Options{Threshold: 5})
	wantErr(t, "threshold 5 of 10", err, "threshold 5 must be in (10/2, 10] for 10 share holders")
	if cfg, err := NewConfig(s, sites(10), 4, Options{Threshold: 6}); err != nil || cfg.Threshold != 6 {
		t.Errorf("threshold 6 of 10: %v", err)
	}
	if _, err := NewConfig(s, sites(3), 4, Options{Clip: 1, ScaleBits: 40}); err != nil {
		t.Errorf("40 scale bits: %v", err)
	}
	_, err = NewConfig(s, sites(3), 4, Options{Clip: 1 << 22, ScaleBits: 40})
	wantErr(t, "C·2^s = 2^62", err, "leaves no room for weights")
	if _, err := NewConfig(s, sites(3), 4, Options{Clip: 1<<22 - 1, ScaleBits: 40}); err != nil {
		t.Errorf("C·2^s just under 2^62: %v", err)
	}
	_, err = NewConfig(s, sites(3), 4, Options{ScaleBits: 41})
	wantErr(t, "41 bits", err, "scale bits 41 must be at most 40")
}

// TestDefaultDegreeCapped: DefaultDegree never exceeds n−1 (at n = 194 the
// bound first holds at k = n, beyond the complete graph).
func TestDefaultDegreeCapped(t *testing.T) {
	for n := 2; n <= 300; n++ {
		if k := DefaultDegree(n, 0.3); k > n-1 || (k < n-1 && k%2 != 0) {
			t.Fatalf("DefaultDegree(%d) = %d: want an even degree below n−1, or n−1", n, k)
		}
	}
}

// TestBinomialTail against the closed forms of small binomials.
func TestBinomialTail(t *testing.T) {
	cases := []struct {
		k, m int
		p    float64
		want float64
	}{
		{2, 1, 0.3, 1 - 0.7*0.7},
		{2, 2, 0.3, 0.09},
		{3, 2, 0.5, 0.5},
		{4, 0, 0.2, 1},
		{5, 5, 0.4, math.Pow(0.4, 5)},
	}
	for _, c := range cases {
		if got := binomialTail(c.k, c.m, c.p); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("P[Bin(%d, %g) ≥ %d] = %g, want %g", c.k, c.p, c.m, got, c.want)
		}
	}
}

// TestFieldArithmetic: GF(2^61−1) addition, subtraction and multiplication
// against math/big, including the results that wrap to exactly 0.
func TestFieldArithmetic(t *testing.T) {
	p := new(big.Int).SetUint64(prime)
	rng := randFor(21)
	pairs := [][2]uint64{{1, prime - 1}, {prime - 1, prime - 1}, {0, 0}, {5, 5}, {prime - 1, 0}, {0, prime - 1}, {1 << 60, 1 << 60}}
	for range 2000 {
		pairs = append(pairs, [2]uint64{rng.Uint64N(prime), rng.Uint64N(prime)})
	}
	for _, ab := range pairs {
		a, b := new(big.Int).SetUint64(ab[0]), new(big.Int).SetUint64(ab[1])
		add := new(big.Int).Mod(new(big.Int).Add(a, b), p).Uint64()
		sub := new(big.Int).Mod(new(big.Int).Sub(a, b), p).Uint64()
		mul := new(big.Int).Mod(new(big.Int).Mul(a, b), p).Uint64()
		if got := addMod(ab[0], ab[1]); got != add {
			t.Fatalf("%d + %d = %d, want %d", ab[0], ab[1], got, add)
		}
		if got := subMod(ab[0], ab[1]); got != sub {
			t.Fatalf("%d − %d = %d, want %d", ab[0], ab[1], got, sub)
		}
		if got := mulMod(ab[0], ab[1]); got != mul {
			t.Fatalf("%d · %d = %d, want %d", ab[0], ab[1], got, mul)
		}
	}
}

// fixedReader yields its words (little endian) and then fails.
type fixedReader struct{ words []uint64 }

func (r *fixedReader) Read(b []byte) (int, error) {
	if len(r.words) == 0 {
		return 0, errors.New("exhausted")
	}
	binary.LittleEndian.PutUint64(b, r.words[0])
	r.words = r.words[1:]
	return 8, nil
}

// TestShamirEdges: a draw of exactly p is rejected (p is not in the
// field); a threshold of 1 gives every holder the secret; a limb of
// 0xffffffff reconstructs; a share limb of p (outside the field) is
// refused.
func TestShamirEdges(t *testing.T) {
	v, err := randField(&fixedReader{[]uint64{prime << 3, 5 << 3}})
	if err != nil || v != 5 {
		t.Fatalf("randField after a draw of p: %d (%v), want the next draw 5", v, err)
	}
	var secret [SecretSize]byte
	for i := range secret {
		secret[i] = 0xff
	}
	secret[5] = 7
	xs := []uint64{1, 2, 3}
	one, err := split(secret, 1, xs, rand.Reader)
	if err != nil {
		t.Fatalf("threshold 1: %v", err)
	}
	for i := range xs {
		if got, err := combine(xs[i:i+1], one[i:i+1]); err != nil || got != secret {
			t.Fatalf("threshold 1, holder %d: %v", i, err)
		}
	}
	if _, err := split(secret, 0, xs, rand.Reader); err == nil {
		t.Error("threshold 0 accepted")
	}
	if _, err := split(secret, 4, xs, rand.Reader); err == nil {
		t.Error("threshold 4 of 3 holders accepted")
	}
	sh, err := split(secret, 2, xs, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := combine(xs[:2], sh[:2]); err != nil || got != secret {
		t.Fatalf("a secret of 0xff limbs: %v", err)
	}
	sh[0][3] = prime
	if _, err := combine(xs[:2], sh[:2]); !errors.Is(err, errBadShares) {
		t.Errorf("a share limb of p: %v, want errBadShares", err)
	}
	// p is ≡ 0 but not a field element: a share limb of p where the true
	// limb is 0 (threshold 1: the share is the secret) is refused too
	var zero [SecretSize]byte
	zero[0] = 1
	z, err := split(zero, 1, xs, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	z[0][5] = prime
	if _, err := combine(xs[:1], z[:1]); !errors.Is(err, errBadShares) {
		t.Errorf("a share limb of p for a limb 0: %v, want errBadShares", err)
	}
}

// TestQuantiserEdges: values at ±Clip are not clipped, values beyond are
// clipped to the nearer end (−Clip below), and a weight at the largest
// total weight encodes.
func TestQuantiserEdges(t *testing.T) {
	q := Quantizer{Clip: 1, ScaleBits: 24}
	dst := make([]uint64, 4)
	if n, err := q.Encode(dst, []float32{1, -1, 0.5}, 1); err != nil || n != 0 {
		t.Fatalf("values at ±Clip: %d clipped (%v), want 0", n, err)
	}
	if n, err := q.Encode(dst, []float32{-3, 2, 0.25}, 2); err != nil || n != 2 {
		t.Fatalf("clipped %d (%v), want 2", n, err)
	}
	mean, w, err := q.Decode(dst)
	if err != nil || w != 2 || !slices.Equal(mean, []float64{-1, 1, 0.25}) {
		t.Fatalf("decoded %v weight %d (%v), want [-1 1 0.25] weight 2", mean, w, err)
	}
	big := Quantizer{Clip: DefaultClip, ScaleBits: DefaultScaleBits}
	if _, err := big.Encode(make([]uint64, 2), []float32{1}, 1<<31-1); err != nil {
		t.Errorf("weight 2^31−1 (the bound): %v", err)
	}
}

// TestWireEdges: IDs up to 2^31 decode and larger ones are refused; a
// forged list length, another version or kind, and trailing bytes are
// refused naming what is wrong; IsConsistency tells the consistency
// message from the others; MaskedInput's length error names the expected
// words.
func TestWireEdges(t *testing.T) {
	m := MaskedInput{From: 1 << 31, Y: []uint64{1, 2}}
	if got, err := UnmarshalMasked(MarshalMasked(m)); err != nil || got.From != 1<<31 {
		t.Errorf("ID 2^31: %v", err)
	}
	m.From = 1<<31 + 1
	_, err := UnmarshalMasked(MarshalMasked(m))
	wantErr(t, "ID 2^31+1", err, "site ID 2147483649 out of range")
	b := MarshalSurvivors([]int{1, 2, 3})
	binary.LittleEndian.PutUint32(b[2:], 10)
	_, err = UnmarshalSurvivors(b)
	wantErr(t, "forged count", err, "list of 10 items in 24 bytes")
	b = MarshalSurvivors([]int{1})
	b[0] = 9
	_, err = UnmarshalSurvivors(b)
	wantErr(t, "version", err, "wire version 9, want 2")
	_, err = UnmarshalSurvivors(MarshalMasked(MaskedInput{From: 1}))
	wantErr(t, "kind", err, fmt.Sprintf("message of kind %d, want %d", tagMasked, tagSurvivors))
	_, err = UnmarshalSurvivors(append(MarshalSurvivors([]int{1}), 0))
	wantErr(t, "trailing", err, "1 bytes after the end")
	c := MarshalConsistency(Consistency{From: 3, Sig: []byte{1, 2}})
	if !IsConsistency(c) || IsConsistency(MarshalReveal(Reveal{From: 3})) || IsConsistency(MarshalShares(nil)) {
		t.Error("IsConsistency")
	}
	bad := slices.Clone(c)
	bad[0] = 1
	if IsConsistency(bad) {
		t.Error("IsConsistency of another wire version")
	}
	r, _, _ := setup(t, 3)
	err = r.srv.ReceiveMasked(MaskedInput{From: r.cfg.Sites[0], Y: make([]uint64, 3)})
	wantErr(t, "short masked", err, "has 3 words, want 17")
}

// TestServerRefusesAfterFinish: revealed shares outside the field are
// refused as they arrive, and a finished round accepts nothing more.
func TestServerRefusesAfterFinish(t *testing.T) {
	r, xs, ws := setup(t, 3)
	alive, sigs := maskAndSign(t, r, xs, ws)
	for i, s := range alive {
		rv, err := r.clients[s].Unmask(sigs)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			bad := rv
			bad.Shares = slices.Clone(rv.Shares)
			bad.Shares[0].Share[2] = prime
			wantErr(t, "limb p", r.srv.ReceiveReveal(bad), "limb 2 is outside the field")
		}
		if err := r.srv.ReceiveReveal(rv); err != nil {
			t.Fatal(err)
		}
	}
	res, err := r.srv.Finish()
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, r.cfg, res, xs, ws, alive)
	_, err = r.srv.Finish()
	wantErr(t, "second Finish", err, "out of turn")
	_, err = r.srv.ConsistencyDone()
	wantErr(t, "consistency after Finish", err, "out of turn")
}

// TestSiteMinimumExactly: a site whose minimum equals the round's sites
// takes part (advertisers and survivors at the minimum are enough), with
// and without authentication.
func TestSiteMinimumExactly(t *testing.T) {
	p := newPKI(t, "site-a", "site-b", "site-c")
	for _, auth := range []*pki{nil, p} {
		r := authRound(t, auth, 3, true)
		for _, c := range r.clients {
			if err := c.RequireSites(3); err != nil {
				t.Fatal(err)
			}
		}
		xs, ws := inputs(randFor(23), r.cfg.Sites, r.cfg.Length, 1)
		res, err := r.run(xs, ws, nil)
		if err != nil {
			t.Fatalf("authenticated %v: %v", auth != nil, err)
		}
		checkResult(t, r.cfg, res, xs, ws, r.cfg.Sites)
	}
}

// TestAuthorityEdges: a round naming client len(Names) (one past the site
// list) is refused; a certificate refused by Authority.Check is refused
// naming it; an identity whose key does not sign for its certificate is
// refused; verifyCert refuses, without panicking, an ID one past the list.
func TestAuthorityEdges(t *testing.T) {
	p := newPKI(t, "site-a", "site-b", "site-c")
	cfg, err := NewConfig(session("past"), []int{0, 1, 3}, 4, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := NewClient(cfg, 0, nil)
	wantErr(t, "client 3 of 3 names", c.Authenticate(p.ids[0], p.authority(true)), "names client 3, which is not in the site list (3 sites)")
	a := p.authority(true)
	if _, err := a.verifyCert(p.ids[0].Cert, 3); err == nil || !strings.Contains(err.Error(), "client 3 is not in the site list") {
		t.Errorf("verifyCert of client 3: %v", err)
	}

	// a revoked certificate (Check) among the relayed keys
	r := authRound(t, p, 3, true)
	auth := p.authority(true)
	auth.Check = func(cert *x509.Certificate) error {
		if cert.Subject.CommonName == "site-c" {
			return errors.New("revoked")
		}
		return nil
	}
	if err := r.clients[0].Authenticate(p.ids[0], auth); err != nil {
		t.Fatal(err)
	}
	_, err = r.clients[0].ShareKeys(advertiseAll(t, r))
	if err == nil || !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), `site 2's certificate ("site-c"): not authenticated: revoked`) {
		t.Errorf("a revoked certificate: %v", err)
	}

	// a key that does not sign for the certificate
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	c, _ = NewClient(r.cfg, 1, nil)
	err = c.Authenticate(Identity{Cert: p.ids[1].Cert, Key: other}, p.authority(true))
	wantErr(t, "wrong key", err, `the key does not sign for its certificate "site-b"`)
}

// TestLowOrderEncryptionKey: a coordinator relaying an all-zero (low-order)
// encryption key for a neighbour makes the site refuse to share, naming
// the neighbour, instead of encrypting its shares under a key of zeros.
func TestLowOrderEncryptionKey(t *testing.T) {
	r := authRound(t, nil, 3, false)
	adv := advertiseAll(t, r)
	adv[1].EncKey = make([]byte, 32)
	_, err := r.clients[0].ShareKeys(adv)
	wantErr(t, "all-zero key", err, "key agreement with site 1")
	_, err = r.clients[2].ShareKeys(adv)
	wantErr(t, "all-zero key, site 2", err, "key agreement with site 1:")
	if bytes.Equal(adv[2].EncKey, adv[1].EncKey) {
		t.Fatal("test setup")
	}
}
