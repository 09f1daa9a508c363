package secagg

import (
	"fmt"
	"math"
)

// Quantizer is the fixed-point code of the updates: values clipped to
// [−Clip, Clip] and scaled by 2^ScaleBits (see the package doc for the
// error bound).
type Quantizer struct {
	Clip      float64
	ScaleBits uint
}

// Bound is the largest error of a decoded weighted mean against the exact
// one for inputs within [−Clip, Clip]: 2^−(ScaleBits+1) (before rounding
// the result to float32).
func (q Quantizer) Bound() float64 { return math.Ldexp(1, -int(q.ScaleBits)-1) }

// maxTotalWeight is the largest Σ w for which every coordinate of the sum
// stays within int64: ⌊(2^63 − 1) / M⌋, where M = round(Clip · 2^s) is
// the largest magnitude of a quantised value (M ≤ 2^62 by check).
func (q Quantizer) maxTotalWeight() uint64 {
	m := uint64(math.RoundToEven(math.Ldexp(q.Clip, int(q.ScaleBits))))
	if m == 0 {
		return math.MaxInt64
	}
	return math.MaxInt64 / m
}

func (q Quantizer) check() error {
	switch {
	case !(q.Clip > 0) || math.IsInf(q.Clip, 0):
		return fmt.Errorf("secagg: clip %v must be positive and finite", q.Clip)
	case q.ScaleBits > 40:
		return fmt.Errorf("secagg: scale bits %d must be at most 40", q.ScaleBits)
	case math.Ldexp(q.Clip, int(q.ScaleBits)) >= math.Ldexp(1, 62):
		return fmt.Errorf("secagg: clip %v × 2^%d leaves no room for weights in 64 bits", q.Clip, q.ScaleBits)
	}
	return nil
}

// Encode quantises x with weight w into dst (len(x)+1 words: w·round(x·2^s)
// in two's complement, then w). It returns how many values were clipped.
// Non-finite values are an error.
func (q Quantizer) Encode(dst []uint64, x []float32, w uint64) (clipped int, err error) {
	if len(dst) != len(x)+1 {
		return 0, fmt.Errorf("secagg: encode %d values into %d words", len(x), len(dst))
	}
	if w == 0 || w > q.maxTotalWeight() {
		return 0, fmt.Errorf("secagg: weight %d outside [1, %d]", w, q.maxTotalWeight())
	}
	scale := math.Ldexp(1, int(q.ScaleBits))
	for i, v := range x {
		f := float64(v)
		switch {
		case math.IsNaN(f) || math.IsInf(f, 0):
			return clipped, fmt.Errorf("secagg: value %d of the update is %v", i, v)
		case f > q.Clip:
			f, clipped = q.Clip, clipped+1
		case f < -q.Clip:
			f, clipped = -q.Clip, clipped+1
		}
		dst[i] = uint64(int64(math.RoundToEven(f*scale)) * int64(w))
	}
	dst[len(x)] = w
	return clipped, nil
}

// Decode turns a sum of Encode outputs into the weighted mean and the
// total weight.
func (q Quantizer) Decode(sum []uint64) ([]float64, uint64, error) {
	if len(sum) == 0 {
		return nil, 0, fmt.Errorf("secagg: empty sum")
	}
	w := sum[len(sum)-1]
	if w == 0 || w > q.maxTotalWeight() {
		return nil, 0, fmt.Errorf("secagg: total weight %d outside [1, %d]", w, q.maxTotalWeight())
	}
	den := math.Ldexp(float64(w), int(q.ScaleBits))
	out := make([]float64, len(sum)-1)
	for i, v := range sum[:len(sum)-1] {
		out[i] = float64(int64(v)) / den
	}
	return out, w, nil
}

// Aggregate is what the protocol computes, without masks: the decoded sum
// of the quantised, weighted inputs. A simulation that calls it gives the
// same bits as a secure aggregation over the network with the same
// Quantizer, whatever the masks and drops.
func (q Quantizer) Aggregate(xs [][]float32, ws []uint64) ([]float64, error) {
	if len(xs) == 0 || len(xs) != len(ws) {
		return nil, fmt.Errorf("secagg: %d inputs and %d weights", len(xs), len(ws))
	}
	sum := make([]uint64, len(xs[0])+1)
	buf := make([]uint64, len(sum))
	for i, x := range xs {
		if len(x) != len(xs[0]) {
			return nil, fmt.Errorf("secagg: input %d has %d values, input 0 has %d", i, len(x), len(xs[0]))
		}
		if _, err := q.Encode(buf, x, ws[i]); err != nil {
			return nil, fmt.Errorf("input %d: %w", i, err)
		}
		for j, v := range buf {
			sum[j] += v
		}
	}
	out, _, err := q.Decode(sum)
	return out, err
}
