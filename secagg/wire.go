package secagg

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Binary encodings of the messages, for a transport to carry as bytes
// (little-endian, fixed-size fields; a version byte first). Decoding
// checks every length and never panics on malformed input.

const wireVersion = 2

// message tags
const (
	tagAdvertise byte = 1 + iota
	tagShares
	tagMasked
	tagReveal
	tagAdvertiseList
	tagSurvivors
	tagConsistency
	tagConsistencyList
)

type writer struct{ b []byte }

func (w *writer) u8(v byte)    { w.b = append(w.b, v) }
func (w *writer) u32(v uint32) { w.b = binary.LittleEndian.AppendUint32(w.b, v) }
func (w *writer) u64(v uint64) { w.b = binary.LittleEndian.AppendUint64(w.b, v) }
func (w *writer) bytes(v []byte) {
	w.u32(uint32(len(v)))
	w.b = append(w.b, v...)
}

type reader struct {
	b   []byte
	err error
}

var errShort = errors.New("message ends early")

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = errShort
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}
func (r *reader) u8() byte {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}
func (r *reader) u32() uint32 {
	if v := r.take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}
func (r *reader) u64() uint64 {
	if v := r.take(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}
func (r *reader) id() int {
	v := r.u64()
	if v > 1<<31 && r.err == nil {
		r.err = fmt.Errorf("site ID %d out of range", v)
	}
	return int(v)
}
func (r *reader) bytes() []byte {
	n := r.u32()
	return append([]byte(nil), r.take(int(n))...)
}

// count reads a list length and checks that at least min bytes per item
// remain, so that a forged length cannot make the decoder allocate.
func (r *reader) count(min int) int {
	n := int(r.u32())
	if r.err == nil && n*min > len(r.b) {
		r.err = fmt.Errorf("list of %d items in %d bytes", n, len(r.b))
		return 0
	}
	return n
}

func header(tag byte) *writer {
	w := &writer{}
	w.u8(wireVersion)
	w.u8(tag)
	return w
}

func open(b []byte, tag byte, what string) (*reader, error) {
	r := &reader{b: b}
	if v := r.u8(); r.err == nil && v != wireVersion {
		return nil, fmt.Errorf("secagg: %s: wire version %d, want %d", what, v, wireVersion)
	}
	if t := r.u8(); r.err == nil && t != tag {
		return nil, fmt.Errorf("secagg: %s: message of kind %d, want %d", what, t, tag)
	}
	if r.err != nil {
		return nil, fmt.Errorf("secagg: %s: %w", what, r.err)
	}
	return r, nil
}

func done(r *reader, what string) error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d bytes after the end", len(r.b))
	}
	if r.err != nil {
		return fmt.Errorf("secagg: %s: %w", what, r.err)
	}
	return nil
}

func (a Advertise) put(w *writer) {
	w.u64(uint64(a.From))
	w.bytes(a.MaskKey)
	w.bytes(a.EncKey)
	w.b = append(w.b, a.Commit[:]...)
	w.bytes(a.Cert)
	w.bytes(a.Sig)
}

func getAdvertise(r *reader) Advertise {
	a := Advertise{From: r.id(), MaskKey: r.bytes(), EncKey: r.bytes()}
	copy(a.Commit[:], r.take(32))
	a.Cert, a.Sig = r.bytes(), r.bytes()
	if len(a.Cert) == 0 {
		a.Cert = nil
	}
	if len(a.Sig) == 0 {
		a.Sig = nil
	}
	return a
}

// MarshalAdvertise encodes round 0's message.
func MarshalAdvertise(a Advertise) []byte { w := header(tagAdvertise); a.put(w); return w.b }

// UnmarshalAdvertise decodes MarshalAdvertise's output.
func UnmarshalAdvertise(b []byte) (Advertise, error) {
	r, err := open(b, tagAdvertise, "keys")
	if err != nil {
		return Advertise{}, err
	}
	a := getAdvertise(r)
	return a, done(r, "keys")
}

// MarshalAdvertiseList encodes the relayed advertisements.
func MarshalAdvertiseList(as []Advertise) []byte {
	w := header(tagAdvertiseList)
	w.u32(uint32(len(as)))
	for _, a := range as {
		a.put(w)
	}
	return w.b
}

// UnmarshalAdvertiseList decodes MarshalAdvertiseList's output.
func UnmarshalAdvertiseList(b []byte) ([]Advertise, error) {
	r, err := open(b, tagAdvertiseList, "relayed keys")
	if err != nil {
		return nil, err
	}
	n := r.count(8 + 4 + 4 + 32 + 4 + 4)
	out := make([]Advertise, 0, n)
	for range n {
		out = append(out, getAdvertise(r))
	}
	return out, done(r, "relayed keys")
}

// MarshalShares encodes a list of encrypted shares (round 1's message, or
// a site's inbox).
func MarshalShares(es []EncryptedShare) []byte {
	w := header(tagShares)
	w.u32(uint32(len(es)))
	for _, e := range es {
		w.u64(uint64(e.From))
		w.u64(uint64(e.To))
		w.bytes(e.Ciphertext)
	}
	return w.b
}

// UnmarshalShares decodes MarshalShares's output.
func UnmarshalShares(b []byte) ([]EncryptedShare, error) {
	r, err := open(b, tagShares, "shares")
	if err != nil {
		return nil, err
	}
	n := r.count(8 + 8 + 4)
	out := make([]EncryptedShare, 0, n)
	for range n {
		out = append(out, EncryptedShare{From: r.id(), To: r.id(), Ciphertext: r.bytes()})
	}
	return out, done(r, "shares")
}

// MarshalMasked encodes round 2's message.
func MarshalMasked(m MaskedInput) []byte {
	w := header(tagMasked)
	w.u64(uint64(m.From))
	w.u32(uint32(len(m.Y)))
	w.b = append(make([]byte, 0, len(w.b)+8*len(m.Y)), w.b...)
	for _, v := range m.Y {
		w.u64(v)
	}
	return w.b
}

// UnmarshalMasked decodes MarshalMasked's output.
func UnmarshalMasked(b []byte) (MaskedInput, error) {
	r, err := open(b, tagMasked, "masked input")
	if err != nil {
		return MaskedInput{}, err
	}
	m := MaskedInput{From: r.id()}
	n := r.count(8)
	m.Y = make([]uint64, n)
	for i := range m.Y {
		m.Y[i] = r.u64()
	}
	return m, done(r, "masked input")
}

// MarshalSurvivors encodes the survivor list of round 3.
func MarshalSurvivors(ids []int) []byte {
	w := header(tagSurvivors)
	w.u32(uint32(len(ids)))
	for _, id := range ids {
		w.u64(uint64(id))
	}
	return w.b
}

// UnmarshalSurvivors decodes MarshalSurvivors's output.
func UnmarshalSurvivors(b []byte) ([]int, error) {
	r, err := open(b, tagSurvivors, "survivors")
	if err != nil {
		return nil, err
	}
	n := r.count(8)
	out := make([]int, n)
	for i := range out {
		out[i] = r.id()
	}
	return out, done(r, "survivors")
}

// MarshalReveal encodes round 3's message.
func MarshalReveal(rv Reveal) []byte {
	w := header(tagReveal)
	w.u64(uint64(rv.From))
	w.u32(uint32(len(rv.Shares)))
	for _, s := range rv.Shares {
		w.u64(uint64(s.Owner))
		w.u8(byte(s.Kind))
		for _, v := range s.Share {
			w.u64(v)
		}
	}
	return w.b
}

// UnmarshalReveal decodes MarshalReveal's output.
func UnmarshalReveal(b []byte) (Reveal, error) {
	r, err := open(b, tagReveal, "revealed shares")
	if err != nil {
		return Reveal{}, err
	}
	rv := Reveal{From: r.id()}
	n := r.count(8 + 1 + 8*limbs)
	rv.Shares = make([]RevealedShare, n)
	for i := range rv.Shares {
		rv.Shares[i].Owner = r.id()
		rv.Shares[i].Kind = ShareKind(r.u8())
		for l := range limbs {
			rv.Shares[i].Share[l] = r.u64()
		}
	}
	return rv, done(r, "revealed shares")
}

// MarshalConsistency encodes the consistency round's message.
func MarshalConsistency(c Consistency) []byte {
	w := header(tagConsistency)
	w.u64(uint64(c.From))
	w.bytes(c.Sig)
	return w.b
}

// UnmarshalConsistency decodes MarshalConsistency's output.
func UnmarshalConsistency(b []byte) (Consistency, error) {
	r, err := open(b, tagConsistency, "survivor-set signature")
	if err != nil {
		return Consistency{}, err
	}
	c := Consistency{From: r.id(), Sig: r.bytes()}
	return c, done(r, "survivor-set signature")
}

// MarshalConsistencyList encodes the relayed survivor-set signatures.
func MarshalConsistencyList(cs []Consistency) []byte {
	w := header(tagConsistencyList)
	w.u32(uint32(len(cs)))
	for _, c := range cs {
		w.u64(uint64(c.From))
		w.bytes(c.Sig)
	}
	return w.b
}

// UnmarshalConsistencyList decodes MarshalConsistencyList's output.
func UnmarshalConsistencyList(b []byte) ([]Consistency, error) {
	r, err := open(b, tagConsistencyList, "survivor-set signatures")
	if err != nil {
		return nil, err
	}
	n := r.count(8 + 4)
	out := make([]Consistency, 0, n)
	for range n {
		out = append(out, Consistency{From: r.id(), Sig: r.bytes()})
	}
	return out, done(r, "survivor-set signatures")
}

// IsConsistency reports whether b is a survivor-set signature
// (MarshalConsistency) rather than another message: the transport carries
// it in the reveal step, before the revealed shares.
func IsConsistency(b []byte) bool {
	return len(b) >= 2 && b[0] == wireVersion && b[1] == tagConsistency
}
