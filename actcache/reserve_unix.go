//go:build unix && !linux && !actcache_nommap

package actcache

// reserve is a no-op where fallocate is not available: the spill file is
// sparse, and a full disk shows up as a fault on write.
func reserve(fd int, off, n int64) error { return nil }
