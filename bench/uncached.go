package bench

import "github.com/pfedmma/pfedmma/methods/prefixcache"

// frozenWork returns what `bench train --method M --uncached` adds to every
// timed step and evaluation: the frozen records of the batch at the
// method's cache depth (the image encoder up to block depth, the image
// features or every token's features), computed afresh as the authors'
// code does at every step, into a scratch buffer (the step itself then
// reads the cached records, which are the same values). Without Uncached
// it does nothing: the production path computes them once per image.
// Split records (px.Split) include block ℓ's frozen output.
func frozenWork(o MethodOptions, px *prefixcache.Prefixer, pixels []float32) func() {
	if !o.Uncached {
		return func() {}
	}
	var scratch []float32
	return func() {
		scratch = px.Compute(pixels, o.Batch, scratch)
	}
}
