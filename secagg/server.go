package secagg

import (
	"crypto/ecdh"
	"fmt"
	"maps"
	"slices"
)

// Result is what the server learns: the weighted mean of the survivors'
// inputs (within Quantizer.Bound of the exact one), their total weight and
// who survived or dropped after sharing keys.
type Result struct {
	Mean      []float64
	Weight    uint64
	Survivors []int
	Dropped   []int
}

// Server is the server's side of a round. It relays keys and encrypted
// shares, collects masked inputs and unmasks only their sum. Its methods
// follow the rounds: Receive* any number of times, then the round's *Done
// call closes it; messages of a closed round are refused.
type Server struct {
	cfg     *Config
	phase   int
	adv     map[int]Advertise
	shares  map[int][]EncryptedShare // sender → its shares
	inbox   map[int][]EncryptedShare // recipient → shares to it
	masked  map[int][]uint64
	reveals map[int]Reveal
	alive   []int
	signed  map[int]Consistency
}

// NewServer starts the server's side of the round cfg.
func NewServer(cfg *Config) *Server {
	return &Server{cfg: cfg, adv: map[int]Advertise{}, shares: map[int][]EncryptedShare{},
		masked: map[int][]uint64{}, reveals: map[int]Reveal{}, signed: map[int]Consistency{}}
}

// Config returns the round's configuration.
func (s *Server) Config() *Config { return s.cfg }

func (s *Server) in(want int, what string) error {
	if s.phase != want {
		return fmt.Errorf("secagg: %s arrived out of turn (the round is at step %d, not %d)", what, s.phase, want)
	}
	return nil
}

// ReceiveAdvertise records a site's keys (round 0).
func (s *Server) ReceiveAdvertise(a Advertise) error {
	if err := s.in(phaseAdvertise, fmt.Sprintf("keys from site %d", a.From)); err != nil {
		return err
	}
	if err := s.cfg.checkAdvertise(a); err != nil {
		return fmt.Errorf("secagg: %w", err)
	}
	if _, dup := s.adv[a.From]; dup {
		return fmt.Errorf("secagg: site %d advertised keys twice", a.From)
	}
	s.adv[a.From] = a
	return nil
}

// KeysDone closes round 0 and returns the advertisements to relay to every
// site that advertised (sorted by site).
func (s *Server) KeysDone() ([]Advertise, error) {
	if err := s.in(phaseAdvertise, "the end of key advertisement"); err != nil {
		return nil, err
	}
	if len(s.adv) < s.cfg.Threshold {
		return nil, fmt.Errorf("secagg: %d sites advertised keys, fewer than the threshold %d", len(s.adv), s.cfg.Threshold)
	}
	s.phase++
	out := make([]Advertise, 0, len(s.adv))
	for _, id := range slices.Sorted(maps.Keys(s.adv)) {
		out = append(out, s.adv[id])
	}
	return out, nil
}

// ReceiveShares records site from's encrypted shares (round 1): one for
// each of its share holders that advertised keys, no more.
func (s *Server) ReceiveShares(from int, shares []EncryptedShare) error {
	if err := s.in(phaseShare, fmt.Sprintf("shares from site %d", from)); err != nil {
		return err
	}
	if _, ok := s.adv[from]; !ok {
		return fmt.Errorf("secagg: shares from site %d, which did not advertise keys", from)
	}
	if _, dup := s.shares[from]; dup {
		return fmt.Errorf("secagg: site %d sent its shares twice", from)
	}
	holders := s.cfg.Holders(from)
	seen := map[int]bool{}
	for _, e := range shares {
		switch {
		case e.From != from:
			return fmt.Errorf("secagg: site %d sent a share in the name of site %d", from, e.From)
		case e.To == from:
			return fmt.Errorf("secagg: site %d addressed a share to itself", from)
		case seen[e.To]:
			return fmt.Errorf("secagg: site %d sent two shares to site %d", from, e.To)
		case len(e.Ciphertext) != CiphertextSize:
			return fmt.Errorf("secagg: site %d's share for site %d has %d bytes, want %d", from, e.To, len(e.Ciphertext), CiphertextSize)
		}
		if _, ok := slices.BinarySearch(holders, e.To); !ok {
			return fmt.Errorf("secagg: site %d sent a share to site %d, which is not its neighbour", from, e.To)
		}
		if _, ok := s.adv[e.To]; !ok {
			return fmt.Errorf("secagg: site %d sent a share to site %d, which did not advertise keys", from, e.To)
		}
		seen[e.To] = true
	}
	s.shares[from] = slices.Clone(shares)
	return nil
}

// SharesDone closes round 1; Inbox then gives each site its shares.
func (s *Server) SharesDone() error {
	if err := s.in(phaseShare, "the end of key sharing"); err != nil {
		return err
	}
	if len(s.shares) < s.cfg.Threshold {
		return fmt.Errorf("secagg: %d sites shared keys, fewer than the threshold %d", len(s.shares), s.cfg.Threshold)
	}
	s.phase++
	s.inbox = map[int][]EncryptedShare{}
	for _, from := range slices.Sorted(maps.Keys(s.shares)) {
		for _, e := range s.shares[from] {
			if _, ok := s.shares[e.To]; ok { // only to sites that shared too
				s.inbox[e.To] = append(s.inbox[e.To], e)
			}
		}
	}
	return nil
}

// Shared returns the sites that shared keys (sorted; after SharesDone).
func (s *Server) Shared() []int { return slices.Sorted(maps.Keys(s.shares)) }

// Inbox returns the shares addressed to site to (after SharesDone).
func (s *Server) Inbox(to int) ([]EncryptedShare, error) {
	if s.phase < phaseMask {
		return nil, fmt.Errorf("secagg: the inbox of site %d asked before key sharing ended", to)
	}
	if _, ok := s.shares[to]; !ok {
		return nil, fmt.Errorf("secagg: site %d did not share keys: it takes no further part in the round", to)
	}
	return slices.Clone(s.inbox[to]), nil
}

// ReceiveMasked records a masked input (round 2).
func (s *Server) ReceiveMasked(m MaskedInput) error {
	if err := s.in(phaseMask, fmt.Sprintf("the masked input of site %d", m.From)); err != nil {
		return err
	}
	if _, ok := s.shares[m.From]; !ok {
		return fmt.Errorf("secagg: masked input from site %d, which did not share keys", m.From)
	}
	if _, dup := s.masked[m.From]; dup {
		return fmt.Errorf("secagg: site %d sent its masked input twice", m.From)
	}
	if len(m.Y) != s.cfg.Length+1 {
		return fmt.Errorf("secagg: masked input of site %d has %d words, want %d", m.From, len(m.Y), s.cfg.Length+1)
	}
	s.masked[m.From] = slices.Clone(m.Y)
	return nil
}

// MaskedDone closes round 2 and returns the survivors to send every one of
// them. It refuses when fewer than the threshold survive.
func (s *Server) MaskedDone() ([]int, error) {
	if err := s.in(phaseMask, "the end of masked input collection"); err != nil {
		return nil, err
	}
	if len(s.masked) < s.cfg.Threshold {
		return nil, fmt.Errorf("secagg: %d masked inputs, fewer than the threshold %d: refusing to unmask", len(s.masked), s.cfg.Threshold)
	}
	s.phase++
	s.alive = slices.Sorted(maps.Keys(s.masked))
	return slices.Clone(s.alive), nil
}

// ReceiveConsistency records a survivor's signature over the survivor set
// (the consistency round). The sites check the signatures; the server only
// relays them.
func (s *Server) ReceiveConsistency(c Consistency) error {
	if err := s.in(phaseConsistency, fmt.Sprintf("the survivor-set signature of site %d", c.From)); err != nil {
		return err
	}
	if _, ok := s.masked[c.From]; !ok {
		return fmt.Errorf("secagg: a survivor-set signature from site %d, which is not a survivor", c.From)
	}
	if _, dup := s.signed[c.From]; dup {
		return fmt.Errorf("secagg: site %d signed the survivor set twice", c.From)
	}
	s.signed[c.From] = Consistency{From: c.From, Sig: slices.Clone(c.Sig)}
	return nil
}

// ConsistencyDone closes the consistency round and returns the signatures
// to relay to every survivor that signed (sorted by site). It refuses when
// fewer than the threshold signed.
func (s *Server) ConsistencyDone() ([]Consistency, error) {
	if err := s.in(phaseConsistency, "the end of the consistency round"); err != nil {
		return nil, err
	}
	if len(s.signed) < s.cfg.Threshold {
		return nil, fmt.Errorf("secagg: %d survivors signed the survivor set, fewer than the threshold %d: refusing to unmask", len(s.signed), s.cfg.Threshold)
	}
	s.phase++
	out := make([]Consistency, 0, len(s.signed))
	for _, id := range slices.Sorted(maps.Keys(s.signed)) {
		out = append(out, s.signed[id])
	}
	return out, nil
}

// Signed returns the survivors that signed the survivor set (sorted).
func (s *Server) Signed() []int { return slices.Sorted(maps.Keys(s.signed)) }

// Masked returns the stored masked input of site id (nil if none): all the
// server holds of a site's update.
func (s *Server) Masked(id int) []uint64 { return slices.Clone(s.masked[id]) }

// ReceiveReveal records a survivor's revealed shares (round 3).
func (s *Server) ReceiveReveal(r Reveal) error {
	if err := s.in(phaseUnmask, fmt.Sprintf("the shares of site %d", r.From)); err != nil {
		return err
	}
	if _, ok := s.signed[r.From]; !ok {
		return fmt.Errorf("secagg: shares revealed by site %d, which did not sign the survivor set", r.From)
	}
	if _, dup := s.reveals[r.From]; dup {
		return fmt.Errorf("secagg: site %d revealed its shares twice", r.From)
	}
	seen := map[int]bool{}
	for _, sh := range r.Shares {
		o := sh.Owner
		if seen[o] {
			return fmt.Errorf("secagg: site %d revealed two shares of site %d", r.From, o)
		}
		seen[o] = true
		if o != r.From && (!s.cfg.adjacent(r.From, o) || s.shares[o] == nil) {
			return fmt.Errorf("secagg: site %d revealed a share of site %d, which it does not hold", r.From, o)
		}
		_, survived := s.masked[o]
		switch {
		case survived && sh.Kind != SelfSeed:
			return fmt.Errorf("secagg: site %d revealed a share of survivor %d that is not its self-mask seed", r.From, o)
		case !survived && sh.Kind != MaskKey:
			return fmt.Errorf("secagg: site %d revealed a share of dropped site %d that is not its mask key", r.From, o)
		}
		for l, v := range sh.Share {
			if v >= prime {
				return fmt.Errorf("secagg: site %d's share of site %d: limb %d is outside the field", r.From, o, l)
			}
		}
	}
	s.reveals[r.From] = Reveal{From: r.From, Shares: slices.Clone(r.Shares)}
	return nil
}

// shares of owner o of the given kind from the reveals, sorted by holder.
func (s *Server) collect(o int, kind ShareKind) ([]uint64, []Share) {
	var xs []uint64
	var sh []Share
	for _, h := range slices.Sorted(maps.Keys(s.reveals)) {
		for _, r := range s.reveals[h].Shares {
			if r.Owner == o && r.Kind == kind {
				xs = append(xs, s.cfg.x(h))
				sh = append(sh, r.Share)
			}
		}
	}
	return xs, sh
}

func (s *Server) reconstruct(o int, kind ShareKind, what string) ([SecretSize]byte, error) {
	xs, sh := s.collect(o, kind)
	t := s.cfg.Threshold
	if len(xs) < t {
		return [SecretSize]byte{}, fmt.Errorf("secagg: %d shares of site %d's %s, fewer than the threshold %d: cannot unmask", len(xs), o, what, t)
	}
	return combine(xs[:t], sh[:t])
}

// Finish closes round 3: it removes the survivors' self masks and the
// pairwise masks of the sites that dropped after sharing keys, and decodes
// the sum.
func (s *Server) Finish() (Result, error) {
	if err := s.in(phaseUnmask, "the unmasking"); err != nil {
		return Result{}, err
	}
	s.phase++
	sum := make([]uint64, s.cfg.Length+1)
	for _, id := range s.alive {
		for i, v := range s.masked[id] {
			sum[i] += v
		}
	}
	for _, id := range s.alive {
		seed, err := s.reconstruct(id, SelfSeed, "self-mask seed")
		if err == nil && commit(s.cfg.Session, id, seed) != s.adv[id].Commit {
			err = errBadShares
		}
		if err != nil {
			return Result{}, fmt.Errorf("secagg: unmasking site %d: %w", id, err)
		}
		addMask(sum, seed, -1)
	}
	var dropped []int
	for _, d := range slices.Sorted(maps.Keys(s.shares)) {
		if _, ok := s.masked[d]; ok {
			continue
		}
		dropped = append(dropped, d)
		var partners []int
		for _, j := range s.cfg.Neighbours(d) {
			if _, ok := s.masked[j]; ok {
				partners = append(partners, j)
			}
		}
		if len(partners) == 0 {
			continue // its masks are in no survivor's input
		}
		secret, err := s.reconstruct(d, MaskKey, "mask key")
		if err != nil {
			return Result{}, fmt.Errorf("secagg: removing the masks of dropped site %d: %w", d, err)
		}
		sk, err := ecdh.X25519().NewPrivateKey(secret[:])
		if err != nil || !slices.Equal(sk.PublicKey().Bytes(), s.adv[d].MaskKey) {
			return Result{}, fmt.Errorf("secagg: removing the masks of dropped site %d: %w", d, errBadShares)
		}
		for _, j := range partners {
			pk, err := ecdh.X25519().NewPublicKey(s.adv[j].MaskKey)
			if err != nil {
				return Result{}, fmt.Errorf("secagg: site %d's mask key: %w", j, err)
			}
			shared, err := sk.ECDH(pk)
			if err != nil {
				return Result{}, fmt.Errorf("secagg: mask agreement of sites %d and %d: %w", d, j, err)
			}
			addMask(sum, pairSeed(s.cfg.Session, d, j, shared), -sign(j, d))
		}
	}
	mean, w, err := s.cfg.Quant.Decode(sum)
	if err != nil {
		return Result{}, err
	}
	return Result{Mean: mean, Weight: w, Survivors: slices.Clone(s.alive), Dropped: dropped}, nil
}
