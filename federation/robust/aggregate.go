package robust

// The arithmetic the wrapper shares with its tests and tools: clipping an
// update, the coordinate-wise rules and the privacy accountant.

import (
	"maps"
	"math"
	"slices"

	"github.com/pfedmma/pfedmma/tensor"
)

// ClipUpdate scales every tensor of a site's update d in place so that
// their joint L2 norm is at most c (clip_norm, dp.clip). The norm is summed
// in the order of the names, so that it is the same bits every time (a
// map's order would change its last bits from run to run).
func ClipUpdate(d tensor.Named, c float64) {
	var ss float64
	for _, name := range slices.Sorted(maps.Keys(d)) {
		for _, v := range d[name].Data {
			ss += float64(v) * float64(v)
		}
	}
	norm := math.Sqrt(ss)
	if norm <= c {
		return
	}
	f := c / norm
	for _, t := range d {
		for j, v := range t.Data {
			t.Data[j] = float32(float64(v) * f)
		}
	}
}

// add is a + b elementwise (a's shape).
func add(a, b *tensor.Tensor) *tensor.Tensor {
	out := tensor.New(a.Shape...)
	for j := range out.Data {
		out.Data[j] = a.Data[j] + b.Data[j]
	}
	return out
}

// MedianOf is the median of x (the mean of the two middle values when
// len(x) is even); x is left as it is.
func MedianOf(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// TrimmedMeanOf drops floor(trim·len(x)) of the smallest and of the
// largest values of x and averages the rest; x is left as it is.
func TrimmedMeanOf(x []float64, trim float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	k := int(math.Floor(trim * float64(len(s))))
	s = s[k : len(s)-k]
	var v float64
	for _, e := range s {
		v += e
	}
	return v / float64(len(s))
}

// Epsilon is the ε of `rounds` compositions of the Gaussian mechanism with
// noise multiplier sigma at δ, by Rényi DP: each round costs α/(2σ²) at
// order α, and ε = min over α of rounds·α/(2σ²) + log(1/δ)/(α−1).
func Epsilon(rounds int, sigma, delta float64) float64 {
	if rounds <= 0 {
		return 0
	}
	best := math.Inf(1)
	for a := 1.01; a <= 1e4; a *= 1.01 {
		e := float64(rounds)*a/(2*sigma*sigma) + math.Log(1/delta)/(a-1)
		best = min(best, e)
	}
	return best
}
