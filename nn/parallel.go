package nn

import (
	"runtime"
	"sync"
)

// ParallelFor splits the index range [0, n) into contiguous chunks and runs
// fn(lo, hi) on them concurrently, one chunk per available CPU. Work smaller
// than minPerChunk per CPU runs on the calling goroutine.
func ParallelFor(n, minPerChunk int, fn func(lo, hi int)) {
	workers := runtime.GOMAXPROCS(0)
	if minPerChunk < 1 {
		minPerChunk = 1
	}
	if w := n / minPerChunk; w < workers {
		workers = w
	}
	if workers <= 1 {
		if n > 0 {
			fn(0, n)
		}
		return
	}
	chunk := (n + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}

// grow returns buf resized to n elements, reusing its storage when large enough.
// The contents are not cleared.
func grow(buf []float32, n int) []float32 {
	if cap(buf) >= n {
		return buf[:n]
	}
	return make([]float32, n)
}

// Grow is grow for other packages: buf resized to n, reusing storage.
func Grow(buf []float32, n int) []float32 { return grow(buf, n) }

// AddInto accumulates dst += src over len(src) values (vectorised, split
// over the CPUs): residual connections and gradient sums.
func AddInto(dst, src []float32) { AddScaledInto(dst, src, 1) }

// AddScaledInto accumulates dst += a·src over len(src) values.
func AddScaledInto(dst, src []float32, a float32) {
	dst = dst[:len(src)]
	ParallelFor(len(src), 1<<15, func(lo, hi int) { axpyKernel(dst[lo:hi], src[lo:hi], a) })
}
