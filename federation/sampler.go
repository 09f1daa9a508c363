package federation

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// samplerStream is the PCG stream constant paired with the seed.
const samplerStream = 0x9e3779b97f4a7c15

// Sampler picks the clients of each round: all of them in round 0 (as the
// reference code does) and whenever Fraction ≥ 1; otherwise
// m = max(1, ⌊Fraction·n⌋) distinct clients (the reference's
// max(int(frac·n), 1)), drawn uniformly without replacement by a partial
// Fisher–Yates shuffle from a PCG generator seeded with (seed,
// 0x9e3779b97f4a7c15), returned in ascending order. Rounds that take every
// client draw no random numbers. The generator state marshals, so a resumed
// run samples exactly as an uninterrupted one.
type Sampler struct {
	Fraction float64
	pcg      *rand.PCG
}

// NewSampler returns a sampler with a seeded generator.
func NewSampler(fraction float64, seed uint64) *Sampler {
	return &Sampler{Fraction: fraction, pcg: rand.NewPCG(seed, samplerStream)}
}

// Count is how many of n clients a sampled round takes.
func (s *Sampler) Count(n int) int {
	if s.Fraction >= 1 {
		return n
	}
	return min(n, max(1, int(s.Fraction*float64(n))))
}

// Sample returns the clients of round, chosen among ids, in ascending order.
func (s *Sampler) Sample(round int, ids []int) []int {
	pool := slices.Clone(ids)
	slices.Sort(pool)
	m := s.Count(len(pool))
	if round == 0 || m >= len(pool) {
		return pool
	}
	r := rand.New(s.pcg)
	for i := 0; i < m; i++ {
		j := i + r.IntN(len(pool)-i)
		pool[i], pool[j] = pool[j], pool[i]
	}
	out := pool[:m]
	slices.Sort(out)
	return out
}

// MarshalBinary returns the generator state.
func (s *Sampler) MarshalBinary() ([]byte, error) { return s.pcg.MarshalBinary() }

// UnmarshalBinary restores a generator state from MarshalBinary.
func (s *Sampler) UnmarshalBinary(b []byte) error {
	if s.pcg == nil {
		s.pcg = &rand.PCG{}
	}
	if err := s.pcg.UnmarshalBinary(b); err != nil {
		return fmt.Errorf("sampler state: %w", err)
	}
	return nil
}
