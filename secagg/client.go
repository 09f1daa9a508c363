package secagg

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
)

// Advertise is round 0's message: a site's two public keys and its
// commitment to its self-mask seed.
type Advertise struct {
	From    int
	MaskKey []byte // X25519 public key of the pairwise masks
	EncKey  []byte // X25519 public key of the share encryption
	Commit  [32]byte
	// Cert and Sig authenticate the rest (an authenticated site): the
	// site's certificate (DER) and its signature over the keys, the
	// commitment and the round's settings (Config.digest). Empty for a
	// site without an Identity.
	Cert, Sig []byte
}

// EncryptedShare is round 1's message from site From to its neighbour To:
// From's shares of its mask key and self-mask seed, readable by To only.
type EncryptedShare struct {
	From, To   int
	Ciphertext []byte
}

// MaskedInput is round 2's message: a site's masked, quantised input
// (Length values and the weight) in Z_2^64.
type MaskedInput struct {
	From int
	Y    []uint64
}

// ShareKind says which secret a revealed share is of.
type ShareKind uint8

// The two secrets of a site.
const (
	// SelfSeed is the self-mask seed b_i of a surviving site.
	SelfSeed ShareKind = 1
	// MaskKey is the mask private key of a site that dropped.
	MaskKey ShareKind = 2
)

// RevealedShare is one share a holder reveals in round 3.
type RevealedShare struct {
	Owner int
	Kind  ShareKind
	Share Share
}

// Reveal is round 3's message from a surviving site: its shares of the
// survivors' self-mask seeds and of the dropped sites' mask keys.
type Reveal struct {
	From   int
	Shares []RevealedShare
}

// plainSize is the size of a share's plaintext: from, to, two shares.
const plainSize = 16 + 2*8*limbs

// CiphertextSize is the size of an EncryptedShare's ciphertext.
const CiphertextSize = plainSize + 16

type held struct{ key, seed Share }

// client phases
const (
	phaseAdvertise = iota
	phaseShare
	phaseMask
	phaseConsistency
	phaseUnmask
	phaseDone
)

// Client is one site's side of a round. Its methods must be called in
// order, once each; any error ends the round for the site.
type Client struct {
	cfg     *Config
	id      int
	rnd     io.Reader
	phase   int
	maskKey *ecdh.PrivateKey
	encKey  *ecdh.PrivateKey
	seed    [32]byte
	keys    map[int]Advertise // the advertised keys of the holders of my shares
	held    map[int]held      // owner → my shares of it (mine included)
	peers   []int             // neighbours whose shares I hold: my mask partners

	me        *Identity                 // nil: unauthenticated
	auth      *Authority                // what peers are checked against
	certs     map[int]*x509.Certificate // the advertisers' verified certificates
	minSites  int                       // the site's own minimum of participants
	survivors []int                     // the survivor set this site signed
}

// RequireSites makes the client refuse a round with fewer than n sites in
// its list, advertising keys or surviving: the site's own minimum, whatever
// the server's settings (n ≤ 2 adds nothing: the protocol needs 2). It must
// be called before Advertise.
func (c *Client) RequireSites(n int) error {
	if c.phase != phaseAdvertise {
		return fmt.Errorf("secagg: site %d: RequireSites after the round began", c.id)
	}
	if len(c.cfg.Sites) < n {
		return fmt.Errorf("secagg: site %d: the round lists %d sites, fewer than this site's minimum %d", c.id, len(c.cfg.Sites), n)
	}
	c.minSites = n
	return nil
}

// NewClient starts site id's side of the round cfg; rnd is the random
// source (nil: crypto/rand).
func NewClient(cfg *Config, id int, rnd io.Reader) (*Client, error) {
	if cfg == nil || !cfg.has(id) {
		return nil, fmt.Errorf("secagg: site %d is not among the round's sites", id)
	}
	if rnd == nil {
		rnd = rand.Reader
	}
	return &Client{cfg: cfg, id: id, rnd: rnd}, nil
}

func (c *Client) step(want int, name string) error {
	if c.phase != want {
		return fmt.Errorf("secagg: site %d: %s called out of order (round step %d, expected %d)", c.id, name, want, c.phase)
	}
	c.phase++
	return nil
}

// Advertise draws the round's keys and seed and returns round 0's message.
func (c *Client) Advertise() (Advertise, error) {
	if err := c.step(phaseAdvertise, "Advertise"); err != nil {
		return Advertise{}, err
	}
	var err error
	if c.maskKey, err = ecdh.X25519().GenerateKey(c.rnd); err != nil {
		return Advertise{}, fmt.Errorf("secagg: mask key: %w", err)
	}
	if c.encKey, err = ecdh.X25519().GenerateKey(c.rnd); err != nil {
		return Advertise{}, fmt.Errorf("secagg: encryption key: %w", err)
	}
	if _, err := io.ReadFull(c.rnd, c.seed[:]); err != nil {
		return Advertise{}, fmt.Errorf("secagg: self-mask seed: %w", err)
	}
	a := Advertise{From: c.id, MaskKey: c.maskKey.PublicKey().Bytes(), EncKey: c.encKey.PublicKey().Bytes(),
		Commit: commit(c.cfg.Session, c.id, c.seed)}
	if c.me != nil {
		a.Cert = c.me.Cert
		if a.Sig, err = signMsg(c.me.Key, c.cfg.advertSigned(a)); err != nil {
			return Advertise{}, fmt.Errorf("secagg: site %d: signing its keys: %w", c.id, err)
		}
	}
	return a, nil
}

// checkAdvertise validates an advertisement's form.
func (cfg *Config) checkAdvertise(a Advertise) error {
	if !cfg.has(a.From) {
		return fmt.Errorf("keys from site %d, which is not among the round's sites", a.From)
	}
	if _, err := ecdh.X25519().NewPublicKey(a.MaskKey); err != nil {
		return fmt.Errorf("site %d's mask key: %w", a.From, err)
	}
	if _, err := ecdh.X25519().NewPublicKey(a.EncKey); err != nil {
		return fmt.Errorf("site %d's encryption key: %w", a.From, err)
	}
	return nil
}

// ShareKeys takes the advertisements the server relays (the sites that
// advertised) and returns the encrypted shares for the holders among them.
func (c *Client) ShareKeys(adv []Advertise) ([]EncryptedShare, error) {
	if err := c.step(phaseShare, "ShareKeys"); err != nil {
		return nil, err
	}
	holders := c.cfg.Holders(c.id)
	c.keys = map[int]Advertise{}
	seen := map[int]bool{}
	for _, a := range adv {
		if err := c.cfg.checkAdvertise(a); err != nil {
			return nil, fmt.Errorf("secagg: site %d: %w", c.id, err)
		}
		if seen[a.From] {
			return nil, fmt.Errorf("secagg: site %d: two advertisements from site %d", c.id, a.From)
		}
		seen[a.From] = true
		if _, ok := slices.BinarySearch(holders, a.From); ok {
			c.keys[a.From] = a
		}
	}
	if err := c.verifyAdverts(adv); err != nil {
		return nil, fmt.Errorf("secagg: site %d refuses the relayed keys: %w", c.id, err)
	}
	if len(seen) < c.minSites {
		return nil, fmt.Errorf("secagg: site %d: %d sites advertised keys, fewer than this site's minimum %d", c.id, len(seen), c.minSites)
	}
	me, ok := c.keys[c.id]
	if !ok || !slices.Equal(me.MaskKey, c.maskKey.PublicKey().Bytes()) || !slices.Equal(me.EncKey, c.encKey.PublicKey().Bytes()) || me.Commit != commit(c.cfg.Session, c.id, c.seed) {
		return nil, fmt.Errorf("secagg: site %d: the relayed keys do not hold this site's own advertisement", c.id)
	}
	if len(c.keys) < c.cfg.Threshold {
		return nil, fmt.Errorf("secagg: site %d: %d of its share holders advertised keys, fewer than the threshold %d", c.id, len(c.keys), c.cfg.Threshold)
	}
	xs := make([]uint64, len(holders))
	for i, h := range holders {
		xs[i] = c.cfg.x(h)
	}
	var keySecret [SecretSize]byte
	copy(keySecret[:], c.maskKey.Bytes())
	keyShares, err := split(keySecret, c.cfg.Threshold, xs, c.rnd)
	if err != nil {
		return nil, err
	}
	seedShares, err := split(c.seed, c.cfg.Threshold, xs, c.rnd)
	if err != nil {
		return nil, err
	}
	c.held = map[int]held{}
	var out []EncryptedShare
	for i, h := range holders {
		if h == c.id {
			c.held[c.id] = held{key: keyShares[i], seed: seedShares[i]}
			continue
		}
		a, ok := c.keys[h]
		if !ok {
			continue // dropped before sharing: gets nothing
		}
		aead, err := c.aead(c.id, h, a.EncKey)
		if err != nil {
			return nil, err
		}
		pt := make([]byte, plainSize)
		binary.LittleEndian.PutUint64(pt[0:], uint64(c.id))
		binary.LittleEndian.PutUint64(pt[8:], uint64(h))
		putShare(pt[16:], keyShares[i])
		putShare(pt[16+8*limbs:], seedShares[i])
		out = append(out, EncryptedShare{From: c.id, To: h, Ciphertext: aead.Seal(nil, make([]byte, aead.NonceSize()), pt, nil)})
	}
	return out, nil
}

// aead is the AES-256-GCM cipher for shares sent from → to, keyed by the
// X25519 agreement of this site's encryption key with the other's.
func (c *Client) aead(from, to int, other []byte) (cipher.AEAD, error) {
	pk, err := ecdh.X25519().NewPublicKey(other)
	if err != nil {
		return nil, fmt.Errorf("secagg: site %d's encryption key: %w", to+from-c.id, err)
	}
	shared, err := c.encKey.ECDH(pk)
	if err != nil {
		return nil, fmt.Errorf("secagg: key agreement with site %d: %w", to+from-c.id, err)
	}
	key := kdf("enc", c.cfg.Session, from, to, shared)
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, fmt.Errorf("secagg: %w", err)
	}
	return cipher.NewGCM(block)
}

func putShare(b []byte, s Share) {
	for l, v := range s {
		binary.LittleEndian.PutUint64(b[8*l:], v)
	}
}

func getShare(b []byte) Share {
	var s Share
	for l := range s {
		s[l] = binary.LittleEndian.Uint64(b[8*l:])
	}
	return s
}

// MaskInput takes the shares addressed to this site (its inbox, relayed by
// the server) and returns the masked input for x with weight w (w ≥ 1:
// the example count for FedAvg, 1 for a uniform mean), and how many values
// were clipped to the quantiser's range.
func (c *Client) MaskInput(inbox []EncryptedShare, x []float32, w uint64) (MaskedInput, int, error) {
	if err := c.step(phaseMask, "MaskInput"); err != nil {
		return MaskedInput{}, 0, err
	}
	if len(x) != c.cfg.Length {
		return MaskedInput{}, 0, fmt.Errorf("secagg: site %d: input of %d values, the round's length is %d", c.id, len(x), c.cfg.Length)
	}
	for _, e := range inbox {
		if e.To != c.id {
			return MaskedInput{}, 0, fmt.Errorf("secagg: site %d: received a share addressed to site %d", c.id, e.To)
		}
		a, ok := c.keys[e.From]
		if !ok || e.From == c.id {
			return MaskedInput{}, 0, fmt.Errorf("secagg: site %d: share from site %d, which is not a neighbour that advertised keys", c.id, e.From)
		}
		if _, dup := c.held[e.From]; dup {
			return MaskedInput{}, 0, fmt.Errorf("secagg: site %d: two shares from site %d", c.id, e.From)
		}
		if len(e.Ciphertext) != CiphertextSize {
			return MaskedInput{}, 0, fmt.Errorf("secagg: site %d: share from site %d has %d bytes, want %d", c.id, e.From, len(e.Ciphertext), CiphertextSize)
		}
		aead, err := c.aead(e.From, c.id, a.EncKey)
		if err != nil {
			return MaskedInput{}, 0, err
		}
		pt, err := aead.Open(nil, make([]byte, aead.NonceSize()), e.Ciphertext, nil)
		if err != nil {
			return MaskedInput{}, 0, fmt.Errorf("secagg: site %d: share from site %d does not decrypt (tampered?): %w", c.id, e.From, err)
		}
		if int(binary.LittleEndian.Uint64(pt)) != e.From || int(binary.LittleEndian.Uint64(pt[8:])) != c.id {
			return MaskedInput{}, 0, fmt.Errorf("secagg: site %d: share from site %d names another sender or recipient", c.id, e.From)
		}
		c.held[e.From] = held{key: getShare(pt[16:]), seed: getShare(pt[16+8*limbs:])}
		c.peers = append(c.peers, e.From)
	}
	slices.Sort(c.peers)
	if len(c.held) < c.cfg.Threshold {
		return MaskedInput{}, 0, fmt.Errorf("secagg: site %d: %d of its share holders shared keys, fewer than the threshold %d", c.id, len(c.held), c.cfg.Threshold)
	}
	y := make([]uint64, c.cfg.Length+1)
	clipped, err := c.cfg.Quant.Encode(y, x, w)
	if err != nil {
		return MaskedInput{}, 0, fmt.Errorf("site %d: %w", c.id, err)
	}
	addMask(y, c.seed, +1)
	for _, j := range c.peers {
		s, err := c.pairSeed(j)
		if err != nil {
			return MaskedInput{}, 0, err
		}
		addMask(y, s, sign(c.id, j))
	}
	return MaskedInput{From: c.id, Y: y}, clipped, nil
}

// sign is the sign of the pairwise mask of i with j in i's input.
func sign(i, j int) int {
	if i < j {
		return +1
	}
	return -1
}

func (c *Client) pairSeed(j int) ([32]byte, error) {
	pk, err := ecdh.X25519().NewPublicKey(c.keys[j].MaskKey)
	if err != nil {
		return [32]byte{}, fmt.Errorf("secagg: site %d's mask key: %w", j, err)
	}
	shared, err := c.maskKey.ECDH(pk)
	if err != nil {
		return [32]byte{}, fmt.Errorf("secagg: mask agreement of sites %d and %d: %w", c.id, j, err)
	}
	return pairSeed(c.cfg.Session, c.id, j, shared), nil
}

// checkSurvivors refuses a survivor list that is malformed, leaves this
// site out, or is shorter than the threshold or the site's minimum.
func (c *Client) checkSurvivors(survivors []int) error {
	alive := map[int]bool{}
	for _, s := range survivors {
		if !c.cfg.has(s) {
			return fmt.Errorf("secagg: site %d: survivor %d is not among the round's sites", c.id, s)
		}
		if alive[s] {
			return fmt.Errorf("secagg: site %d: survivor %d listed twice", c.id, s)
		}
		alive[s] = true
	}
	if !alive[c.id] {
		return fmt.Errorf("secagg: site %d: the survivor list leaves this site out", c.id)
	}
	if len(survivors) < c.cfg.Threshold {
		return fmt.Errorf("secagg: site %d: %d survivors, fewer than the threshold %d: refusing to unmask", c.id, len(survivors), c.cfg.Threshold)
	}
	if len(survivors) < c.minSites {
		return fmt.Errorf("secagg: site %d: %d survivors, fewer than this site's minimum %d: refusing to unmask", c.id, len(survivors), c.minSites)
	}
	return nil
}

// Unmask takes the survivors' signatures over the survivor set (the
// consistency round, relayed by the server) and reveals, for every site
// whose shares this site holds, the self-seed share of a survivor or the
// mask-key share of a site that dropped. It refuses when fewer than the
// threshold of survivors signed the set this site signed (an authenticated
// client verifies each signature: a server that showed sites different
// survivor sets is caught here), or when fewer than the threshold of this
// site's share holders survive.
func (c *Client) Unmask(sigs []Consistency) (Reveal, error) {
	if err := c.step(phaseUnmask, "Unmask"); err != nil {
		return Reveal{}, err
	}
	if err := c.checkConsistency(sigs); err != nil {
		return Reveal{}, fmt.Errorf("secagg: site %d: consistency check failed, refusing to unmask: %w", c.id, err)
	}
	alive := map[int]bool{}
	for _, s := range c.survivors {
		alive[s] = true
	}
	n := 0
	for o := range c.held {
		if alive[o] {
			n++
		}
	}
	if n < c.cfg.Threshold {
		return Reveal{}, fmt.Errorf("secagg: site %d: %d of its share holders survive, fewer than the threshold %d: refusing to unmask", c.id, n, c.cfg.Threshold)
	}
	r := Reveal{From: c.id}
	owners := make([]int, 0, len(c.held))
	for o := range c.held {
		owners = append(owners, o)
	}
	slices.Sort(owners)
	for _, o := range owners {
		if alive[o] {
			r.Shares = append(r.Shares, RevealedShare{Owner: o, Kind: SelfSeed, Share: c.held[o].seed})
		} else {
			r.Shares = append(r.Shares, RevealedShare{Owner: o, Kind: MaskKey, Share: c.held[o].key})
		}
	}
	c.held = nil // never reveal twice
	return r, nil
}
