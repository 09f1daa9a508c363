package gemm

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// TestBitIdenticalUnderConcurrency: a product's bits depend on its operands
// and the configured thread count only, never on what other goroutines do
// at the same time. Before the fixed partition, Parallel (many small
// products, as attention runs them) switched OpenBLAS to one thread for the
// whole process, so a product computed meanwhile by another goroutine (a
// second in-process site, a concurrent evaluation) ran on another partition
// and differed in the last bits under Haswell, Zen, Sandybridge and
// Prescott kernels.
func TestBitIdenticalUnderConcurrency(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	shapes := []struct{ m, n, k int }{{197, 64, 64}, {64, 256, 50}, {128, 128, 700}, {394, 192, 64}}
	type product struct {
		m, n, k int
		a, b    []float32
		want    []float32
	}
	var ps []product
	for _, s := range shapes {
		p := product{m: s.m, n: s.n, k: s.k, a: randVec(rng, s.m*s.k), b: randVec(rng, s.n*s.k)}
		p.want = make([]float32, s.m*s.n)
		MatMul(false, true, s.m, s.n, s.k, p.a, p.b, p.want, false)
		ps = append(ps, p)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // attention-like load: many small single-threaded products
		defer wg.Done()
		x, y := randVec(rng, 64*64), randVec(rng, 64*64)
		for !stop.Load() {
			Parallel(8, 2, func(int) {
				out := make([]float32, 64*64)
				MatMul(false, true, 64, 64, 64, x, y, out, false)
			})
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()
	for rep := 0; rep < 200; rep++ {
		for _, p := range ps {
			got := make([]float32, p.m*p.n)
			MatMul(false, true, p.m, p.n, p.k, p.a, p.b, got, false)
			for i := range got {
				if got[i] != p.want[i] {
					t.Fatalf("%s kernels, %d×%d×%d, repetition %d: c[%d] = %v, alone %v (bits depend on concurrent calls)", CoreName(), p.m, p.n, p.k, rep, i, got[i], p.want[i])
				}
			}
		}
	}
}

// TestBitIdenticalInsideParallel: a product run inside Parallel (where it
// runs on one thread) has the bits of the same product outside it.
func TestBitIdenticalInsideParallel(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	m, n, k := 300, 200, 128
	a, b := randVec(rng, m*k), randVec(rng, n*k)
	want := make([]float32, m*n)
	MatMul(false, true, m, n, k, a, b, want, false)
	got := make([][]float32, 4)
	Parallel(len(got), 2, func(i int) {
		got[i] = make([]float32, m*n)
		MatMul(false, true, m, n, k, a, b, got[i], false)
	})
	for j, g := range got {
		for i := range g {
			if g[i] != want[i] {
				t.Fatalf("%s kernels: product %d inside Parallel: c[%d] = %v, outside %v", CoreName(), j, i, g[i], want[i])
			}
		}
	}
}
