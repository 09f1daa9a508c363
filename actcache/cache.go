// Package actcache stores fixed-size float32 activation records — the
// output of a frozen model prefix, one record per image view or class
// prompt — in RAM up to a memory budget and in a memory-mapped spill file
// beyond it.
//
// A record is RecordLen float32 values (for example a ViT-B/16 prefix
// output of 197×768 floats). Records are addressed by a dense index
// 0..Len()-1, assigned in insertion order, and by a string key (see Key).
//
// Concurrency: every method is safe for concurrent use. Readers (Get,
// GetBatch, Lookup, Len, Bytes) run in parallel with each other; writers
// (Put, Close) are serialized and exclude readers while they hold the
// cache, so a reader never sees a half-written record.
package actcache

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
)

// DType is the storage format of records. Records are always read and
// written as float32; DType only changes how they are kept.
type DType int

const (
	// Float32 keeps records bit-exact (4 bytes per value). It is the default.
	Float32 DType = iota
	// BFloat16 keeps the upper 16 bits of each float32, rounded to nearest
	// even (2 bytes per value), halving memory and disk. It is lossy: the
	// relative error of each value is at most 2^-8 (about 0.4%, two to three
	// significant decimal digits), values beyond ±3.39e38 round to ±Inf, and
	// float32 subnormals lose precision. NaN stays NaN; ±0 and ±Inf are exact.
	BFloat16
)

// String returns the name of the dtype ("float32", "bf16").
func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case BFloat16:
		return "bf16"
	}
	return "DType(" + strconv.Itoa(int(d)) + ")"
}

// size returns the bytes per stored value.
func (d DType) size() int {
	if d == BFloat16 {
		return 2
	}
	return 4
}

// DefaultSpillChunk is the default growth step of the spill file in bytes.
const DefaultSpillChunk = 64 << 20

// Options configure a Cache.
type Options struct {
	// RecordLen is the number of float32 values in every record
	// (for an image prefix, tokens×width). It must be positive.
	RecordLen int
	// MemoryBudget is the number of bytes of record storage kept in RAM.
	// Records that would exceed it go to the spill file. 0 spills every record.
	MemoryBudget int64
	// SpillDir is the directory of the spill file; "" means os.TempDir().
	SpillDir string
	// DType is the storage format; the zero value is Float32 (exact).
	DType DType
	// SpillChunk is the number of bytes the spill file grows by (rounded up
	// to whole records and pages); 0 means DefaultSpillChunk.
	SpillChunk int64
	// Workers bounds the goroutines GetBatch uses for large batches;
	// 0 means runtime.GOMAXPROCS(0).
	Workers int
}

// Errors callers may branch on with errors.Is.
var (
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("actcache: cache is closed")
	// ErrRecordLen is returned when a record or buffer has the wrong length.
	ErrRecordLen = errors.New("actcache: wrong record length")
	// ErrIndex is returned for a record index outside 0..Len()-1.
	ErrIndex = errors.New("actcache: record index out of range")
)

// tier says where a record lives.
type tier uint8

const (
	inRAM tier = iota
	inSpill
)

// loc is the place of one record: a RAM slot or a spill slot.
type loc struct {
	tier tier
	slot int
}

// Cache is a store of fixed-size float32 records. Create one with New or
// Open; release its RAM and spill file with Close.
type Cache struct {
	recLen   int   // float32 values per record
	recBytes int   // stored bytes per record
	dtype    DType // storage format
	budget   int64 // RAM budget in bytes
	spillDir string
	chunk    int64
	workers  int

	mu     sync.RWMutex
	closed bool
	index  map[string]int // key -> record index
	keys   []string       // record index -> key
	locs   []loc          // record index -> place
	ram    [][]byte       // RAM slots, each recBytes long
	spill  *spill         // nil until the first record spills
	nSpill int            // spill slots in use
}

// New returns an empty cache configured by opts.
func New(opts Options) (*Cache, error) {
	if opts.RecordLen <= 0 {
		return nil, fmt.Errorf("actcache: record length %d: must be positive", opts.RecordLen)
	}
	if opts.MemoryBudget < 0 {
		return nil, fmt.Errorf("actcache: memory budget %d bytes (cache.memory_mib): must not be negative", opts.MemoryBudget)
	}
	if opts.DType != Float32 && opts.DType != BFloat16 {
		return nil, fmt.Errorf("actcache: cache type %v (cache.dtype): want float32 or bfloat16", opts.DType)
	}
	if opts.SpillChunk < 0 {
		return nil, fmt.Errorf("actcache: spill chunk %d: must not be negative", opts.SpillChunk)
	}
	if opts.Workers < 0 {
		return nil, fmt.Errorf("actcache: %d workers: must not be negative", opts.Workers)
	}
	recBytes := opts.RecordLen * opts.DType.size()
	if recBytes/opts.DType.size() != opts.RecordLen {
		return nil, fmt.Errorf("actcache: record length %d: too large", opts.RecordLen)
	}
	dir := opts.SpillDir
	if dir == "" {
		dir = os.TempDir()
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("actcache: spill folder %q (cache.spill_dir): %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("actcache: spill folder %q (cache.spill_dir): not a directory", dir)
	}
	chunk := opts.SpillChunk
	if chunk == 0 {
		chunk = DefaultSpillChunk
	}
	workers := opts.Workers
	if workers == 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	return &Cache{
		recLen:   opts.RecordLen,
		recBytes: recBytes,
		dtype:    opts.DType,
		budget:   opts.MemoryBudget,
		spillDir: dir,
		chunk:    chunk,
		workers:  workers,
		index:    make(map[string]int),
	}, nil
}

// Key returns the cache key of view number view of the item named item
// (for example an image path or a class prompt): item + "#" + view.
func Key(item string, view int) string {
	return item + "#" + strconv.Itoa(view)
}

// RecordLen returns the number of float32 values in every record.
func (c *Cache) RecordLen() int { return c.recLen }

// DType returns the storage format of the cache.
func (c *Cache) DType() DType { return c.dtype }

// Put stores rec under key and returns its record index. A new key gets
// the next index (Len() before the call); an existing key keeps its index
// and its record is overwritten. rec must hold exactly RecordLen values.
func (c *Cache) Put(key string, rec []float32) (int, error) {
	if len(rec) != c.recLen {
		return 0, fmt.Errorf("actcache: Put %q: record has %d values, want the record length %d: %w", key, len(rec), c.recLen, ErrRecordLen)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, ErrClosed
	}
	idx, err := c.putLocked(key, rec)
	if err != nil {
		return 0, fmt.Errorf("actcache: Put %q: %w", key, err)
	}
	return idx, nil
}

// putLocked stores rec under key; c.mu is held for writing. Its errors
// carry no "actcache:" prefix; callers add it with the key.
func (c *Cache) putLocked(key string, rec []float32) (int, error) {
	if idx, ok := c.index[key]; ok {
		if err := c.writeLocked(c.locs[idx], rec); err != nil {
			return 0, fmt.Errorf("overwrite record %d: %w", idx, err)
		}
		return idx, nil
	}
	var l loc
	if int64(len(c.ram)+1)*int64(c.recBytes) <= c.budget {
		l = loc{tier: inRAM, slot: len(c.ram)}
		c.ram = append(c.ram, newSlot(c.recBytes))
	} else {
		if c.spill == nil {
			s, err := newSpill(c.spillDir, c.recBytes, c.chunk)
			if err != nil {
				return 0, err
			}
			c.spill = s
		}
		if err := c.spill.ensure(c.nSpill + 1); err != nil {
			return 0, err
		}
		l = loc{tier: inSpill, slot: c.nSpill}
		c.nSpill++
	}
	if err := c.writeLocked(l, rec); err != nil {
		return 0, err
	}
	idx := len(c.keys)
	c.index[key] = idx
	c.keys = append(c.keys, key)
	c.locs = append(c.locs, l)
	return idx, nil
}

// writeLocked encodes rec into the place l; c.mu is held for writing.
func (c *Cache) writeLocked(l loc, rec []float32) error {
	if l.tier == inRAM {
		encode(c.ram[l.slot], rec, c.dtype)
		return nil
	}
	return c.spill.write(l.slot, rec, c.dtype)
}

// readLocked decodes the record at place l into dst; c.mu is held for reading.
func (c *Cache) readLocked(l loc, dst []float32) error {
	if l.tier == inRAM {
		decode(dst, c.ram[l.slot], c.dtype)
		return nil
	}
	return c.spill.read(l.slot, dst, c.dtype)
}

// Lookup returns the record index stored under key.
func (c *Cache) Lookup(key string) (int, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	idx, ok := c.index[key]
	return idx, ok
}

// KeyOf returns the key of record idx.
func (c *Cache) KeyOf(idx int) (string, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return "", ErrClosed
	}
	if idx < 0 || idx >= len(c.keys) {
		return "", fmt.Errorf("actcache: KeyOf(%d): cache has %d records: %w", idx, len(c.keys), ErrIndex)
	}
	return c.keys[idx], nil
}

// Len returns the number of records.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.keys)
}

// Bytes returns the bytes of record storage held in RAM and the bytes of
// the spill file on disk (which grows in chunks, so it may exceed the
// records it holds).
func (c *Cache) Bytes() (ram, disk int64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	ram = int64(len(c.ram)) * int64(c.recBytes)
	if c.spill != nil {
		disk = c.spill.size()
	}
	return ram, disk
}

// Get copies record idx into dst, which must hold exactly RecordLen values.
func (c *Cache) Get(idx int, dst []float32) error {
	if len(dst) != c.recLen {
		return fmt.Errorf("actcache: Get(%d): dst has %d values, want the record length %d: %w", idx, len(dst), c.recLen, ErrRecordLen)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return ErrClosed
	}
	if idx < 0 || idx >= len(c.locs) {
		return fmt.Errorf("actcache: Get(%d): cache has %d records: %w", idx, len(c.locs), ErrIndex)
	}
	if err := c.readLocked(c.locs[idx], dst); err != nil {
		return fmt.Errorf("actcache: Get(%d): %w", idx, err)
	}
	return nil
}

// parallelBytes is the batch size in bytes from which GetBatch copies with
// several goroutines.
const parallelBytes = 4 << 20

// GetBatch copies records idxs[0], idxs[1], … into consecutive
// RecordLen-sized rows of dst, which must hold exactly
// len(idxs)×RecordLen values (a [B, T, D] batch buffer). Batches of at least
// 4 MiB are copied by up to Options.Workers goroutines. Every index is
// checked before anything is copied.
func (c *Cache) GetBatch(idxs []int, dst []float32) error {
	if len(dst) != len(idxs)*c.recLen {
		return fmt.Errorf("actcache: GetBatch: dst has %d values, want %d records × record length %d = %d: %w",
			len(dst), len(idxs), c.recLen, len(idxs)*c.recLen, ErrRecordLen)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return ErrClosed
	}
	for i, idx := range idxs {
		if idx < 0 || idx >= len(c.locs) {
			return fmt.Errorf("actcache: GetBatch: idxs[%d] = %d: cache has %d records: %w", i, idx, len(c.locs), ErrIndex)
		}
	}
	workers := min(c.workers, len(idxs))
	if workers <= 1 || int64(len(dst))*4 < parallelBytes {
		return c.copyRange(idxs, dst, 0, len(idxs))
	}
	// Worker w copies the contiguous rows [w*n/workers, (w+1)*n/workers).
	// The read lock taken above covers all workers; they must not re-lock.
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*len(idxs)/workers, (w+1)*len(idxs)/workers
		wg.Go(func() { errs[w] = c.copyRange(idxs, dst, lo, hi) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// copyRange copies rows lo..hi-1 of a GetBatch; c.mu is held for reading.
func (c *Cache) copyRange(idxs []int, dst []float32, lo, hi int) error {
	for i := lo; i < hi; i++ {
		if err := c.readLocked(c.locs[idxs[i]], dst[i*c.recLen:(i+1)*c.recLen]); err != nil {
			return fmt.Errorf("actcache: GetBatch: idxs[%d] = %d: %w", i, idxs[i], err)
		}
	}
	return nil
}

// Close releases the RAM records and deletes the spill file. Calling Close
// again returns nil; every other method returns ErrClosed afterwards.
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.ram, c.locs, c.keys, c.index = nil, nil, nil, nil
	if c.spill != nil {
		err := c.spill.close()
		c.spill = nil
		if err != nil {
			return fmt.Errorf("actcache: Close: %w", err)
		}
	}
	return nil
}
