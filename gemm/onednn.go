//go:build !purego && !nodnnl

package gemm

/*
#cgo CFLAGS: -O3 -fopenmp
#cgo LDFLAGS: -ldnnl -fopenmp
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

static dnnl_engine_t pf_engine;
static dnnl_stream_t pf_stream;

static int pf_dnnl_init(void) {
	if (dnnl_engine_create(&pf_engine, dnnl_cpu, 0) != dnnl_success) return 1;
	if (dnnl_stream_create(&pf_stream, pf_engine, dnnl_stream_default_flags) != dnnl_success) return 2;
	return 0;
}

// pf_weights_plain describes W as stored: bf16 [n,k] row-major read as its
// transpose (transw), or [k,n] row-major.
static void pf_weights_plain(dnnl_memory_desc_t *wei, long n, long k, int transw) {
	dnnl_dims_t wd = {k, n}, ws_t = {1, k}, ws_n = {n, 1};
	dnnl_memory_desc_init_by_strides(wei, 2, wd, dnnl_bf16, transw ? ws_t : ws_n);
}

// pf_matmul_create makes the primitive for C[m,n] (+)= A[m,k]·op(W) (+ bias):
// A bf16 row-major, bias f32 [n], C f32. With packed the weights' layout is
// the one the primitive prefers (format_tag any; W is reordered into it once,
// pf_pack), else W as stored; *wmd receives the layout it reads.
static int pf_matmul_create(dnnl_primitive_t *prim, dnnl_memory_desc_t *wmd, long m, long n, long k, int transw, int bias, int accumulate, int packed) {
	dnnl_memory_desc_t src, wei, bia, dst;
	dnnl_dims_t sd = {m, k}, ss = {k, 1};
	dnnl_dims_t wd = {k, n};
	dnnl_dims_t dd = {m, n}, ds = {n, 1};
	dnnl_dims_t bd = {1, n}, bs = {n, 1};
	int st = 0;
	if (dnnl_memory_desc_init_by_strides(&src, 2, sd, dnnl_bf16, ss)) return 10;
	if (packed) {
		if (dnnl_memory_desc_init_by_tag(&wei, 2, wd, dnnl_bf16, dnnl_format_tag_any)) return 11;
	} else {
		pf_weights_plain(&wei, n, k, transw);
	}
	if (dnnl_memory_desc_init_by_strides(&dst, 2, dd, dnnl_f32, ds)) return 12;
	if (dnnl_memory_desc_init_by_strides(&bia, 2, bd, dnnl_f32, bs)) return 13;
	dnnl_matmul_desc_t md;
	if (dnnl_matmul_desc_init(&md, &src, &wei, bias ? &bia : NULL, &dst)) return 14;
	dnnl_primitive_attr_t attr;
	if (dnnl_primitive_attr_create(&attr)) return 15;
	dnnl_post_ops_t po = NULL;
	if (accumulate) {
		if (dnnl_post_ops_create(&po) || dnnl_post_ops_append_sum(po, 1.0f) ||
		    dnnl_primitive_attr_set_post_ops(attr, po)) st = 16;
	}
	dnnl_primitive_desc_t pd = NULL;
	if (!st && dnnl_primitive_desc_create(&pd, &md, attr, pf_engine, NULL)) st = 17;
	if (!st) {
		const dnnl_memory_desc_t *q = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
		if (q) *wmd = *q; else st = 19;
	}
	if (!st && dnnl_primitive_create(prim, pd)) st = 18;
	if (pd) dnnl_primitive_desc_destroy(pd);
	if (po) dnnl_post_ops_destroy(po);
	dnnl_primitive_attr_destroy(attr);
	return st;
}

// pf_pack reorders W as stored into the layout wmd, in a new 64-byte aligned
// buffer (*out; free it with free).
static int pf_pack(void **out, const uint16_t *w, long n, long k, int transw, const dnnl_memory_desc_t *wmd) {
	dnnl_memory_desc_t plain;
	pf_weights_plain(&plain, n, k, transw);
	size_t sz = dnnl_memory_desc_get_size(wmd);
	void *buf = aligned_alloc(64, ((sz + 63) / 64) * 64);
	if (!buf) return 30;
	dnnl_primitive_desc_t rpd = NULL;
	dnnl_primitive_t r = NULL;
	dnnl_memory_t from = NULL, to = NULL;
	int st = 0;
	if (dnnl_reorder_primitive_desc_create(&rpd, &plain, pf_engine, wmd, pf_engine, NULL)) st = 31;
	if (!st && dnnl_primitive_create(&r, rpd)) st = 32;
	if (!st && (dnnl_memory_create(&from, &plain, pf_engine, (void *)w) ||
	            dnnl_memory_create(&to, wmd, pf_engine, buf))) st = 33;
	if (!st) {
		dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
		if (dnnl_primitive_execute(r, pf_stream, 2, args) || dnnl_stream_wait(pf_stream)) st = 34;
	}
	if (from) dnnl_memory_destroy(from);
	if (to) dnnl_memory_destroy(to);
	if (r) dnnl_primitive_destroy(r);
	if (rpd) dnnl_primitive_desc_destroy(rpd);
	if (st) { free(buf); return st; }
	*out = buf;
	return 0;
}

static int pf_md_equal(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b) { return dnnl_memory_desc_equal(a, b); }

// pf_to_bf16 rounds n floats to bfloat16 (nearest even), on nt threads.
static void pf_to_bf16(uint16_t *dst, const float *src, long n, int nt) {
	#pragma omp parallel for num_threads(nt) schedule(static) if(n > 65536)
	for (long i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, src + i, 4);
		u += 0x7fff + ((u >> 16) & 1);
		dst[i] = (uint16_t)(u >> 16);
	}
}

static uint16_t *pf_abuf;
static long pf_abuf_n;

// pf_matmul converts A to bfloat16 and runs the primitive on nt threads.
static int pf_matmul(dnnl_primitive_t prim, long m, long k, const float *a,
                     const void *w, const dnnl_memory_desc_t *wmd, const float *bias, long n, float *c, int nt) {
	if (pf_abuf_n < m * k) {
		free(pf_abuf);
		pf_abuf = (uint16_t *)aligned_alloc(64, ((m * k * 2 + 63) / 64) * 64);
		if (!pf_abuf) { pf_abuf_n = 0; return 20; }
		pf_abuf_n = m * k;
	}
	omp_set_num_threads(nt);
	pf_to_bf16(pf_abuf, a, m * k, nt);
	dnnl_memory_desc_t src, bia, dst;
	dnnl_dims_t sd = {m, k}, ss = {k, 1}, ws = {1}, dd = {m * n}, bd = {n};
	// The memories' descriptors only need the right sizes (the weights' the
	// primitive's own layout): the primitive reads them through its own.
	dnnl_memory_desc_init_by_strides(&src, 2, sd, dnnl_bf16, ss);
	dnnl_memory_desc_init_by_strides(&dst, 1, dd, dnnl_f32, ws);
	dnnl_memory_desc_init_by_strides(&bia, 1, bd, dnnl_f32, ws);
	dnnl_memory_t ms = NULL, mw = NULL, md = NULL, mb = NULL;
	int st = 0;
	if (dnnl_memory_create(&ms, &src, pf_engine, pf_abuf) ||
	    dnnl_memory_create(&mw, wmd, pf_engine, (void *)w) ||
	    dnnl_memory_create(&md, &dst, pf_engine, c) ||
	    (bias && dnnl_memory_create(&mb, &bia, pf_engine, (void *)bias))) st = 21;
	if (!st) {
		dnnl_exec_arg_t args[4] = {
			{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, md}, {DNNL_ARG_BIAS, mb}};
		if (dnnl_primitive_execute(prim, pf_stream, bias ? 4 : 3, args)) st = 22;
		else if (dnnl_stream_wait(pf_stream)) st = 23;
	}
	if (ms) dnnl_memory_destroy(ms);
	if (mw) dnnl_memory_destroy(mw);
	if (md) dnnl_memory_destroy(md);
	if (mb) dnnl_memory_destroy(mb);
	return st;
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

const bf16Backend = "onednn"

func newBF16Storage(b *BF16Weights, w []float32) {
	b.bits = make([]uint16, len(w))
	for i, v := range w {
		b.bits[i] = ToBF16(v)
	}
}

// primKey identifies one cached oneDNN primitive.
type primKey struct {
	m, n, k                        int
	transW, bias, accumulate, pack bool
}

// primitive is a cached oneDNN matmul and the weights layout it reads:
// packed, its own blocked layout (weights reordered once, packFor), or W as
// stored.
type primitive struct {
	p      C.dnnl_primitive_t
	wmd    C.dnnl_memory_desc_t
	packed bool
}

// packedWeights is a BF16Weights reordered once into a primitive's layout;
// its C memory is freed when the BF16Weights is collected.
type packedWeights struct {
	transW bool
	wmd    C.dnnl_memory_desc_t
	ptr    unsafe.Pointer
}

// packs are a BF16Weights' reordered copies, one per layout and orientation.
type packs []*packedWeights

// packBF16 lets primitives read weights in the layout they prefer
// (format_tag any), reordered once per weight matrix; off, every product
// reads W as stored (the benchmarks' "before").
var packBF16 = true

// onednn holds the engine, the stream and the primitives made so far (one
// per product shape); calls are serialised (the model runs one product at a
// time, each on every thread).
var onednn struct {
	sync.Mutex
	once  sync.Once
	err   error
	prims map[primKey]*primitive // nil: no oneDNN kernel for the shape
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// newPrimitive makes the primitive for key, packed where packBF16 allows
// and oneDNN offers it, else reading W as stored; nil when oneDNN has no
// kernel for it here.
func newPrimitive(key primKey) *primitive {
	for _, packed := range []bool{key.pack, false} {
		pr := &primitive{packed: packed}
		if C.pf_matmul_create(&pr.p, &pr.wmd, C.long(key.m), C.long(key.n), C.long(key.k), cbool(key.transW), cbool(key.bias), cbool(key.accumulate), cbool(packed)) != 0 {
			continue
		}
		if packed {
			var plain C.dnnl_memory_desc_t
			C.pf_weights_plain(&plain, C.long(key.n), C.long(key.k), cbool(key.transW))
			pr.packed = C.pf_md_equal(&plain, &pr.wmd) == 0
		}
		return pr
	}
	return nil
}

// packFor returns w reordered into pr's layout, made on first use.
func (w *BF16Weights) packFor(transW bool, pr *primitive, n, k int) (unsafe.Pointer, error) {
	for _, pk := range w.packs {
		if pk.transW == transW && C.pf_md_equal(&pk.wmd, &pr.wmd) != 0 {
			return pk.ptr, nil
		}
	}
	var ptr unsafe.Pointer
	if st := C.pf_pack(&ptr, (*C.uint16_t)(unsafe.Pointer(&w.bits[0])), C.long(n), C.long(k), cbool(transW), &pr.wmd); st != 0 {
		return nil, fmt.Errorf("gemm: oneDNN reorder of bf16 weights %d×%d: status %d", w.Rows, w.Cols, int(st))
	}
	w.packs = append(w.packs, &packedWeights{transW: transW, wmd: pr.wmd, ptr: ptr})
	runtime.AddCleanup(w, func(p unsafe.Pointer) { C.free(p) }, ptr)
	return ptr, nil
}

func matMulBF16(transW bool, m, n, k int, a []float32, w *BF16Weights, bias, c []float32, accumulate bool) {
	onednn.Lock()
	defer onednn.Unlock()
	onednn.once.Do(func() {
		if st := C.pf_dnnl_init(); st != 0 {
			onednn.err = fmt.Errorf("gemm: oneDNN engine (status %d)", int(st))
		}
		onednn.prims = map[primKey]*primitive{}
	})
	if onednn.err != nil {
		// No usable oneDNN (such as a CPU it does not support): same rounding, emulated.
		emulatedMatMulBF16(transW, m, n, k, a, w, bias, c, accumulate)
		return
	}
	key := primKey{m, n, k, transW, bias != nil, accumulate, packBF16}
	pr, ok := onednn.prims[key]
	if !ok {
		pr = newPrimitive(key)
		onednn.prims[key] = pr
	}
	if pr == nil {
		emulatedMatMulBF16(transW, m, n, k, a, w, bias, c, accumulate)
		return
	}
	wp := unsafe.Pointer(&w.bits[0])
	if pr.packed {
		var err error
		if wp, err = w.packFor(transW, pr, n, k); err != nil {
			panic(err.Error()) // oneDNN offered a layout it cannot reorder into
		}
	}
	var pb *C.float
	if bias != nil {
		pb = (*C.float)(unsafe.Pointer(&bias[0]))
	}
	st := C.pf_matmul(pr.p, C.long(m), C.long(k), (*C.float)(unsafe.Pointer(&a[0])),
		wp, &pr.wmd, pb, C.long(n), (*C.float)(unsafe.Pointer(&c[0])), C.int(max(threads(), 1)))
	if st != 0 {
		panic(fmt.Sprintf("gemm: oneDNN bf16 matmul %d×%d×%d: status %d", m, n, k, int(st)))
	}
}
