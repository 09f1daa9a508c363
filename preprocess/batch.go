package preprocess

import (
	"context"
	"runtime"
	"sync"
)

// EvalFiles applies EvalFile to every path using up to workers goroutines
// (GOMAXPROCS when workers ≤ 0) and returns the results in the order of
// paths. It stops at the first error, or when ctx is cancelled, and returns
// that error. Transform methods are safe for concurrent use.
func (t Transform) EvalFiles(ctx context.Context, paths []string, workers int) ([][]float32, error) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, max(len(paths), 1))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make([][]float32, len(paths))
	jobs := make(chan int)
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel() })
	}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				v, err := t.EvalFile(paths[i])
				if err != nil {
					fail(err)
					continue
				}
				out[i] = v
			}
		}()
	}
feed:
	for i := range paths {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
