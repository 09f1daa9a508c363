//go:build !purego

package nn

/*
#cgo CFLAGS: -O3 -Wno-psabi
#cgo LDFLAGS: -lm
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
	long j0 = 0;
	if (nv >= 8) {
		v8f vm = load8(row, 8);
		for (j0 = 8; j0 + 8 <= nv; j0 += 8) {
			v8f x = load8(row + j0, 8);
			vm = vsel(x > vm, x, vm);
		}
		for (int t = 0; t < 8; t++) mx = vm[t] > mx ? vm[t] : mx;
	}
	for (long j = j0; j < nv; j++) mx = row[j] > mx ? row[j] : mx;
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
static inline float hsum8(v8f v) {
	float s = 0;
	for (int t = 0; t < 8; t++) s += v[t];
	return s;
}
// pf_layernorm_fwd normalises rows [0, n) of inp [n, c] in float32 (two
// passes: mean, then the biased variance of the centred values).
CLONES void pf_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                             const float *w, const float *b, long n, long c, float eps) {
	for (long i = 0; i < n; i++) {
		const float *x = inp + i * c;
		float *o = out + i * c;
		v8f acc = {0};
		long j = 0;
		for (; j + 8 <= c; j += 8) acc += load8(x + j, 8);
		float s = hsum8(acc);
		for (; j < c; j++) s += x[j];
		float m = s / (float)c;
		v8f acc2 = {0};
		for (j = 0; j + 8 <= c; j += 8) {
			v8f d = load8(x + j, 8) - m;
			acc2 += d * d;
		}
		float v = hsum8(acc2);
		for (; j < c; j++) v += (x[j] - m) * (x[j] - m);
		float rs = 1.0f / __builtin_sqrtf(v / (float)c + eps);
		for (j = 0; j + 8 <= c; j += 8)
			store8(o + j, (load8(x + j, 8) - m) * rs * load8(w + j, 8) + load8(b + j, 8), 8);
		for (; j < c; j++) o[j] = (x[j] - m) * rs * w[j] + b[j];
		if (mean) { mean[i] = m; rstd[i] = rs; }
	}
}
// pf_layernorm_bwd_dx: dinp += rstd·(g·w − mean(g·w) − x̂·mean(g·w·x̂)) per row.
CLONES void pf_layernorm_bwd_dx(float *dinp, const float *dout, const float *inp, const float *mean,
                                const float *rstd, const float *w, long n, long c) {
	for (long i = 0; i < n; i++) {
		const float *x = inp + i * c, *g = dout + i * c;
		float *dx = dinp + i * c;
		float m = mean[i], rs = rstd[i];
		v8f sd = {0}, sdx = {0};
		long j = 0;
		for (; j + 8 <= c; j += 8) {
			v8f xh = (load8(x + j, 8) - m) * rs, d = load8(g + j, 8) * load8(w + j, 8);
			sd += d;
			sdx += d * xh;
		}
		float sumD = hsum8(sd), sumDX = hsum8(sdx);
		for (; j < c; j++) {
			float xh = (x[j] - m) * rs, d = g[j] * w[j];
			sumD += d;
			sumDX += d * xh;
		}
		sumD /= (float)c;
		sumDX /= (float)c;
		for (j = 0; j + 8 <= c; j += 8) {
			v8f xh = (load8(x + j, 8) - m) * rs;
			store8(dx + j, load8(dx + j, 8) + rs * (load8(g + j, 8) * load8(w + j, 8) - sumD - xh * sumDX), 8);
		}
		for (; j < c; j++) {
			float xh = (x[j] - m) * rs;
			dx[j] += rs * (g[j] * w[j] - sumD - xh * sumDX);
		}
	}
}
// pf_layernorm_bwd_dw: columns [lo, hi) of dw += Σ_rows g·x̂ and db += Σ_rows g
// (either may be NULL).
CLONES void pf_layernorm_bwd_dw(float *dw, float *db, const float *dout, const float *inp, const float *mean,
                                const float *rstd, long n, long c, long lo, long hi) {
	for (long i = 0; i < n; i++) {
		const float *x = inp + i * c, *g = dout + i * c;
		float m = mean[i], rs = rstd[i];
		for (long j = lo; j < hi; j += 8) {
			long k = hi - j < 8 ? hi - j : 8;
			v8f gv = load8(g + j, k);
			if (dw) store8(dw + j, load8(dw + j, k) + gv * (load8(x + j, k) - m) * rs, k);
			if (db) store8(db + j, load8(db + j, k) + gv, k);
		}
	}
}
// pf_axpy: dst += a·src over n values.
CLONES void pf_axpy(float *dst, const float *src, float a, long n) {
	long j = 0;
	for (; j + 8 <= n; j += 8) store8(dst + j, load8(dst + j, 8) + a * load8(src + j, 8), 8);
	for (; j < n; j++) dst[j] += a * src[j];
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

// layerNormForwardKernel normalises the n rows of inp [n, c].
func layerNormForwardKernel(out, mean, rstd, inp, w, b []float32, n, c int) {
	if n == 0 || c == 0 {
		return
	}
	var pm, pr *C.float
	if mean != nil {
		pm, pr = fptr(mean), fptr(rstd)
	}
	C.pf_layernorm_fwd(fptr(out), pm, pr, fptr(inp), fptr(w), fptr(b), C.long(n), C.long(c), C.float(LayerNormEps))
}

// layerNormBackwardDxKernel accumulates the input gradient of n rows.
func layerNormBackwardDxKernel(dinp, dout, inp, mean, rstd, w []float32, n, c int) {
	if n == 0 || c == 0 {
		return
	}
	C.pf_layernorm_bwd_dx(fptr(dinp), fptr(dout), fptr(inp), fptr(mean), fptr(rstd), fptr(w), C.long(n), C.long(c))
}

// layerNormBackwardDwKernel accumulates columns [lo, hi) of dw and db (either may be nil).
func layerNormBackwardDwKernel(dw, db, dout, inp, mean, rstd []float32, n, c, lo, hi int) {
	if n == 0 || lo >= hi {
		return
	}
	var pw, pb *C.float
	if dw != nil {
		pw = fptr(dw)
	}
	if db != nil {
		pb = fptr(db)
	}
	C.pf_layernorm_bwd_dw(pw, pb, fptr(dout), fptr(inp), fptr(mean), fptr(rstd), C.long(n), C.long(c), C.long(lo), C.long(hi))
}

// axpyKernel computes dst += a·src over equal-length slices.
func axpyKernel(dst, src []float32, a float32) {
	if len(src) > 0 {
		C.pf_axpy(fptr(dst), fptr(src), C.float(a), C.long(len(src)))
	}
}
