//go:build !purego

package nn

/*
#cgo CFLAGS: -O3 -Wno-psabi
#include <stdint.h>
#include <string.h>

// Vectorised elementwise kernels, written with GCC vector extensions (8
// floats at a time) so that they vectorise whatever the compiler flags.
// GCC compiles each for AVX-512, AVX2 and baseline x86-64 and picks one at
// load time (function multi-versioning), so the binary stays portable.
// exp is the Cephes single-precision polynomial (relative error ~1e-7).
#if defined(__x86_64__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

static inline v8f vsel(v8i m, v8f a, v8f b) { return (v8f)((m & (v8i)a) | (~m & (v8i)b)); }

static inline v8f vexp(v8f x) {
	const v8f hi = (v8f){0} + 88.72283f, lo = (v8f){0} - 87.33654f;
	x = vsel(x > hi, hi, x);
	x = vsel(x < lo, lo, x);
	v8f fx = x * 1.44269504088896341f + 0.5f;
	v8i n = __builtin_convertvector(fx, v8i); // truncation toward zero
	v8f fn = __builtin_convertvector(n, v8f);
	n += (v8i)(fx < fn);                      // floor: -1 where truncation rounded up
	fn = __builtin_convertvector(n, v8f);
	v8f r = x - fn * 0.693359375f + fn * 2.12194440e-4f;
	v8f y = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r + 4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f;
	y = y * r * r + r + 1.0f;
	return y * (v8f)((n + 127) << 23);
}

// load8/store8 move 8 floats (k < 8 only for the tail: a rare library call).
static inline v8f load8(const float *p, long k) {
	v8f v = {0};
	if (k == 8) memcpy(&v, p, 32); else memcpy(&v, p, k * sizeof(float));
	return v;
}
static inline void store8(float *p, v8f v, long k) {
	if (k == 8) memcpy(p, &v, 32); else memcpy(p, &v, k * sizeof(float));
}

CLONES void pf_quickgelu_fwd(float *out, const float *in, long n) {
	for (long i = 0; i < n; i += 8) {
		long k = n - i < 8 ? n - i : 8;
		v8f x = load8(in + i, k);
		store8(out + i, x / (1.0f + vexp(-1.702f * x)), k);
	}
}

CLONES void pf_quickgelu_bwd(float *din, const float *dout, const float *in, long n) {
	for (long i = 0; i < n; i += 8) {
		long k = n - i < 8 ? n - i : 8;
		v8f x = load8(in + i, k);
		v8f s = 1.0f / (1.0f + vexp(-1.702f * x));
		v8f d = load8(din + i, k) + load8(dout + i, k) * (s + 1.702f * x * s * (1.0f - s));
		store8(din + i, d, k);
	}
}

// pf_softmax_row: softmax over row[0:nv], zeros in row[nv:m].
CLONES void pf_softmax_row(float *row, long nv, long m) {
	float mx = row[0];
	for (long j = 1; j < nv; j++) mx = row[j] > mx ? row[j] : mx;
	v8f acc = {0};
	for (long j = 0; j < nv; j += 8) {
		long k = nv - j < 8 ? nv - j : 8;
		v8f e = vexp(load8(row + j, k) - mx);
		if (k < 8) {
			for (long t = k; t < 8; t++) e[t] = 0;
		}
		acc += e;
		store8(row + j, e, k);
	}
	float sum = 0;
	for (int t = 0; t < 8; t++) sum += acc[t];
	float inv = 1.0f / sum;
	for (long j = 0; j < nv; j++) row[j] *= inv;
	for (long j = nv; j < m; j++) row[j] = 0;
}

// pf_softmax_bwd_row: dp = p ⊙ (dp − Σ p⊙dp) · scale over n entries.
CLONES void pf_softmax_bwd_row(const float *p, float *dp, long n, float scale) {
	v8f acc = {0};
	long j = 0;
	for (; j + 8 <= n; j += 8) acc += load8(p + j, 8) * load8(dp + j, 8);
	float dot = 0;
	for (int t = 0; t < 8; t++) dot += acc[t];
	for (; j < n; j++) dot += p[j] * dp[j];
	for (long i = 0; i < n; i++) dp[i] = p[i] * (dp[i] - dot) * scale;
}
*/
import "C"

import "unsafe"

func fptr(x []float32) *C.float { return (*C.float)(unsafe.Pointer(unsafe.SliceData(x))) }

// quickGELUForwardKernel computes out = x·σ(1.702x) over equal-length slices.
func quickGELUForwardKernel(out, in []float32) {
	if len(in) > 0 {
		C.pf_quickgelu_fwd(fptr(out), fptr(in), C.long(len(in)))
	}
}

// quickGELUBackwardKernel accumulates din += dout·QuickGELU'(in).
func quickGELUBackwardKernel(din, dout, in []float32) {
	if len(in) > 0 {
		C.pf_quickgelu_bwd(fptr(din), fptr(dout), fptr(in), C.long(len(in)))
	}
}

// softmaxRowKernel applies softmax to row[:nv] and zeroes row[nv:].
func softmaxRowKernel(row []float32, nv int) {
	if len(row) > 0 {
		C.pf_softmax_row(fptr(row), C.long(nv), C.long(len(row)))
	}
}

// softmaxBackwardRowKernel computes dp = p ⊙ (dp − Σ p⊙dp) · scale.
func softmaxBackwardRowKernel(p, dp []float32, scale float32) {
	if len(p) > 0 {
		C.pf_softmax_bwd_row(fptr(p), fptr(dp), C.long(len(p)), C.float(scale))
	}
}
