package secagg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
)

// prime is the Mersenne prime 2^61 − 1 of the share field GF(p).
const prime uint64 = 1<<61 - 1

// limbs is how many 32-bit limbs a 32-byte secret is cut into.
const limbs = 8

// SecretSize is the size of a shared secret (a mask private key or a
// self-mask seed) in bytes.
const SecretSize = 32

// Share is one holder's share of a secret: the evaluations of the limbs'
// polynomials at the holder's x (its index + 1, implicit).
type Share [limbs]uint64

func addMod(a, b uint64) uint64 {
	s := a + b // < 2^62: no overflow
	if s >= prime {
		s -= prime
	}
	return s
}

func subMod(a, b uint64) uint64 {
	if a >= b {
		return a - b
	}
	return a + prime - b
}

func mulMod(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	// a·b = hi·2^64 + lo < 2^122; x mod (2^61−1) = (x >> 61) + (x & p).
	s := (hi<<3 | lo>>61) + (lo & prime)
	for s >= prime {
		s -= prime
	}
	return s
}

func powMod(a, e uint64) uint64 {
	r := uint64(1)
	for ; e > 0; e >>= 1 {
		if e&1 == 1 {
			r = mulMod(r, a)
		}
		a = mulMod(a, a)
	}
	return r
}

func invMod(a uint64) uint64 { return powMod(a, prime-2) }

// randField draws a uniform element of GF(p) by rejection.
func randField(r io.Reader) (uint64, error) {
	var b [8]byte
	for {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, fmt.Errorf("secagg: random source: %w", err)
		}
		v := binary.LittleEndian.Uint64(b[:]) >> 3 // 61 bits
		if v < prime {
			return v, nil
		}
	}
}

// split shares secret among holders at x = xs[i] (distinct, in 1..p−1) so
// that any t of them reconstruct it.
func split(secret [SecretSize]byte, t int, xs []uint64, r io.Reader) ([]Share, error) {
	if t < 1 || t > len(xs) {
		return nil, fmt.Errorf("secagg: threshold %d for %d holders", t, len(xs))
	}
	out := make([]Share, len(xs))
	coef := make([]uint64, t)
	for l := range limbs {
		coef[0] = uint64(binary.LittleEndian.Uint32(secret[4*l:]))
		for d := 1; d < t; d++ {
			c, err := randField(r)
			if err != nil {
				return nil, err
			}
			coef[d] = c
		}
		for i, x := range xs {
			// Horner: c0 + x(c1 + x(c2 + …)).
			v := uint64(0)
			for d := t - 1; d >= 0; d-- {
				v = addMod(mulMod(v, x), coef[d])
			}
			out[i][l] = v
		}
	}
	return out, nil
}

// errBadShares is a reconstruction whose limbs are not 32-bit values: at
// least one share was corrupted.
var errBadShares = errors.New("shares are inconsistent (a corrupted share)")

// combine reconstructs a secret from shares at distinct xs (Lagrange
// interpolation at 0). It cannot tell too few shares from enough: the
// caller checks the count and the result (public key, commitment).
func combine(xs []uint64, shares []Share) ([SecretSize]byte, error) {
	var secret [SecretSize]byte
	if len(xs) != len(shares) || len(xs) == 0 {
		return secret, fmt.Errorf("secagg: %d x values for %d shares", len(xs), len(shares))
	}
	// λ_i = Π_{j≠i} x_j / (x_j − x_i)
	lambda := make([]uint64, len(xs))
	for i, xi := range xs {
		num, den := uint64(1), uint64(1)
		for j, xj := range xs {
			if j == i {
				continue
			}
			if xj == xi {
				return secret, fmt.Errorf("secagg: two shares at x = %d", xi)
			}
			num = mulMod(num, xj)
			den = mulMod(den, subMod(xj, xi))
		}
		lambda[i] = mulMod(num, invMod(den))
	}
	for l := range limbs {
		v := uint64(0)
		for i := range xs {
			if shares[i][l] >= prime {
				return secret, errBadShares
			}
			v = addMod(v, mulMod(lambda[i], shares[i][l]))
		}
		if v > 0xffffffff {
			return secret, errBadShares
		}
		binary.LittleEndian.PutUint32(secret[4*l:], uint32(v))
	}
	return secret, nil
}
