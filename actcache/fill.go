package actcache

import (
	"context"
	"fmt"
)

// ComputeFunc computes the records of one batch for Fill: it writes the
// record of keys[i] to out[i*RecordLen:(i+1)*RecordLen]. start is the
// position of keys[0] among the missing keys Fill computes (0, batch,
// 2×batch, …). out is reused between calls and must not be retained.
type ComputeFunc func(ctx context.Context, start int, keys []string, out []float32) error

// Fill makes sure every key in keys has a record. It drops keys already in
// the cache (and repeated keys), splits the rest in order into batches of
// at most batch keys, calls compute for each batch, and stores the results
// with Put. progress, if not nil, is called with done = 0 before the first
// batch and after every stored batch, with total = the number of keys to
// compute. Fill stops at the first error of compute or Put, or when ctx is
// done; the batches stored before that stay in the cache.
//
// compute runs without holding the cache, so readers are not blocked while
// it works; only one Fill should run at a time for a given set of keys.
func (c *Cache) Fill(ctx context.Context, keys []string, batch int, compute ComputeFunc, progress func(done, total int)) error {
	if batch <= 0 {
		return fmt.Errorf("actcache: Fill: batch = %d: must be positive", batch)
	}
	if compute == nil {
		return fmt.Errorf("actcache: Fill: compute is nil")
	}
	missing, err := c.missing(keys)
	if err != nil {
		return err
	}
	if progress != nil {
		progress(0, len(missing))
	}
	if len(missing) == 0 {
		return nil
	}
	out := make([]float32, min(batch, len(missing))*c.recLen)
	for start := 0; start < len(missing); start += batch {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("actcache: Fill: stopped after %d of %d records: %w", start, len(missing), err)
		}
		end := min(start+batch, len(missing))
		bk := missing[start:end]
		bo := out[:len(bk)*c.recLen]
		clear(bo)
		if err := compute(ctx, start, bk, bo); err != nil {
			return fmt.Errorf("actcache: Fill: compute records %d..%d (keys %q..%q): %w", start, end-1, bk[0], bk[len(bk)-1], err)
		}
		if err := c.putBatch(bk, bo); err != nil {
			return fmt.Errorf("actcache: Fill: %w", err)
		}
		if progress != nil {
			progress(end, len(missing))
		}
	}
	return nil
}

// missing returns the keys not yet in the cache, in order, without repeats.
func (c *Cache) missing(keys []string) ([]string, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil, ErrClosed
	}
	seen := make(map[string]bool)
	var out []string
	for _, k := range keys {
		if _, ok := c.index[k]; ok || seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, k)
	}
	return out, nil
}

// putBatch stores the records of keys, laid out consecutively in recs,
// under one write lock.
func (c *Cache) putBatch(keys []string, recs []float32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	for i, k := range keys {
		if _, err := c.putLocked(k, recs[i*c.recLen:(i+1)*c.recLen]); err != nil {
			return fmt.Errorf("store %q: %w", k, err)
		}
	}
	return nil
}
