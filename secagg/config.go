package secagg

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"
)

// Options are the tunable settings of a round; zero values take the
// defaults.
type Options struct {
	// Degree is k, the number of neighbours of each site (even, or ≥ n−1
	// for the complete graph); 0: DefaultDegree(n, Dropout).
	Degree int
	// Threshold is t, the shares needed to reconstruct a secret; 0:
	// ⌊(k+1)/2⌋ + 1. It must exceed (k+1)/2 (see the threat model).
	Threshold int
	// Dropout is δ, the fraction of sites expected to drop after key
	// sharing that the default degree is chosen to survive (default 0.3).
	Dropout float64
	// Clip and ScaleBits are the quantisation (defaults 256 and 24).
	Clip      float64
	ScaleBits uint
	// Round is the federation round the session belongs to; it is part of
	// what authenticated sites sign.
	Round int
}

// Default quantisation.
const (
	DefaultClip      = 256
	DefaultScaleBits = 24
	DefaultDropout   = 0.3
)

// Config is one round's public settings, the same on the server and every
// site: the participants, the graph, the threshold, the input length and
// the quantisation.
type Config struct {
	Session   [32]byte
	Round     int
	Sites     []int // sorted, distinct
	Degree    int
	Threshold int
	Length    int // values per input (the weight is one more word)
	Quant     Quantizer

	index map[int]int   // site → index in Sites
	neigh map[int][]int // site → sorted neighbours
}

// NewConfig builds a round's configuration for sites (distinct IDs ≥ 0)
// sending inputs of length values each.
func NewConfig(session [32]byte, sites []int, length int, o Options) (*Config, error) {
	n := len(sites)
	if n < 2 {
		return nil, fmt.Errorf("secagg: %d sites: secure aggregation needs at least 2", n)
	}
	if length < 1 {
		return nil, fmt.Errorf("secagg: input length %d must be positive", length)
	}
	ss := slices.Sorted(slices.Values(sites))
	for i, id := range ss {
		if id < 0 {
			return nil, fmt.Errorf("secagg: site ID %d is negative", id)
		}
		if i > 0 && ss[i-1] == id {
			return nil, fmt.Errorf("secagg: site %d listed twice", id)
		}
	}
	if o.Dropout == 0 {
		o.Dropout = DefaultDropout
	}
	if !(o.Dropout > 0 && o.Dropout < 0.5) {
		return nil, fmt.Errorf("secagg: dropout %v must be in (0, 0.5)", o.Dropout)
	}
	k := o.Degree
	if k == 0 {
		k = DefaultDegree(n, o.Dropout)
	}
	if k >= n-1 {
		k = n - 1
	} else if k < 2 || k%2 != 0 {
		return nil, fmt.Errorf("secagg: degree %d must be even and at least 2 (or ≥ %d: the complete graph)", k, n-1)
	}
	t := o.Threshold
	if t == 0 {
		t = (k+1)/2 + 1
	}
	if 2*t <= k+1 || t > k+1 {
		return nil, fmt.Errorf("secagg: threshold %d must be in (%d/2, %d] for %d share holders", t, k+1, k+1, k+1)
	}
	q := Quantizer{Clip: o.Clip, ScaleBits: o.ScaleBits}
	if q.Clip == 0 {
		q.Clip = DefaultClip
	}
	if q.ScaleBits == 0 {
		q.ScaleBits = DefaultScaleBits
	}
	if err := q.check(); err != nil {
		return nil, err
	}
	if o.Round < 0 {
		return nil, fmt.Errorf("secagg: round %d is negative", o.Round)
	}
	c := &Config{Session: session, Round: o.Round, Sites: ss, Degree: k, Threshold: t, Length: length, Quant: q}
	c.build()
	return c, nil
}

// build computes the index and the Harary graph H(k, n) on the ring ordered
// by SHA-256(session ‖ id).
func (c *Config) build() {
	n := len(c.Sites)
	c.index = make(map[int]int, n)
	for i, id := range c.Sites {
		c.index[id] = i
	}
	ring := slices.Clone(c.Sites)
	key := func(id int) [32]byte {
		var b [40]byte
		copy(b[:], c.Session[:])
		binary.LittleEndian.PutUint64(b[32:], uint64(id))
		return sha256.Sum256(b[:])
	}
	keys := make(map[int][32]byte, n)
	for _, id := range ring {
		keys[id] = key(id)
	}
	sort.Slice(ring, func(a, b int) bool {
		ka, kb := keys[ring[a]], keys[ring[b]]
		return string(ka[:]) < string(kb[:])
	})
	c.neigh = make(map[int][]int, n)
	for p, id := range ring {
		var nb []int
		if c.Degree >= n-1 {
			nb = slices.DeleteFunc(slices.Clone(c.Sites), func(j int) bool { return j == id })
		} else {
			for d := 1; d <= c.Degree/2; d++ {
				nb = append(nb, ring[(p+d)%n], ring[(p-d+n)%n])
			}
			slices.Sort(nb)
		}
		c.neigh[id] = nb
	}
}

// Neighbours returns site id's neighbours (sorted; nil for an unknown site).
func (c *Config) Neighbours(id int) []int { return c.neigh[id] }

// Holders returns the holders of site id's shares: itself and its
// neighbours, sorted.
func (c *Config) Holders(id int) []int {
	if _, ok := c.index[id]; !ok {
		return nil
	}
	h := append(slices.Clone(c.neigh[id]), id)
	slices.Sort(h)
	return h
}

// has reports whether id takes part in the round.
func (c *Config) has(id int) bool { _, ok := c.index[id]; return ok }

// x is the Shamir abscissa of holder id.
func (c *Config) x(id int) uint64 { return uint64(c.index[id]) + 1 }

// adjacent reports whether a and b are neighbours.
func (c *Config) adjacent(a, b int) bool {
	_, found := slices.BinarySearch(c.neigh[a], b)
	return found
}

// DefaultDegree is the smallest even k for which n sites, each dropping
// independently with probability dropout, leave every site's share holders
// short of a threshold with probability at most 2^-20 (union bound:
// n·P[Binomial(k, dropout) ≥ k/2] ≤ 2^-20), capped at n−1 (the complete
// graph).
func DefaultDegree(n int, dropout float64) int {
	for k := 2; k < n-1; k += 2 {
		if float64(n)*binomialTail(k, k/2, dropout) <= math.Ldexp(1, -20) {
			return k
		}
	}
	return n - 1
}

// binomialTail is P[Binomial(k, p) ≥ m].
func binomialTail(k, m int, p float64) float64 {
	var s float64
	for i := m; i <= k; i++ {
		lg, _ := math.Lgamma(float64(k + 1))
		l1, _ := math.Lgamma(float64(i + 1))
		l2, _ := math.Lgamma(float64(k - i + 1))
		s += math.Exp(lg - l1 - l2 + float64(i)*math.Log(p) + float64(k-i)*math.Log1p(-p))
	}
	return s
}
