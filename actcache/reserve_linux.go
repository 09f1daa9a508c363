//go:build linux && !actcache_nommap

package actcache

import (
	"errors"

	"golang.org/x/sys/unix"
)

// reserve allocates disk blocks for [off, off+n) of fd. File systems
// without fallocate support are not an error: the file is then sparse.
func reserve(fd int, off, n int64) error {
	err := unix.Fallocate(fd, 0, off, n)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return nil
	}
	return err
}
