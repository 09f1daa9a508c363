// Package nn holds the layers the models are built from, each as a pair of
// plain functions in the style of llm.c: XForward(out, saved…, inp, weights…,
// sizes) and XBackward(dinp, dweights…, dout, inp, saved…, weights…, sizes),
// with shapes written at the top of each. Backward passes accumulate (+=)
// into gradient buffers, and a nil gradient buffer means "not needed".
// Products go through package gemm; elementwise kernels are vectorised C
// (or pure Go under the purego build tag).
package nn
