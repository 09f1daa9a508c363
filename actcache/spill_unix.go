//go:build unix && !actcache_nommap

package actcache

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// spill is the overflow store: an unlinked temporary file mapped into
// memory one chunk (segment) at a time. Growing it maps a new segment and
// never remaps old ones, so slices into existing segments stay valid.
type spill struct {
	f        *os.File
	name     string   // path the file had before it was unlinked
	recBytes int      // bytes per record
	segRecs  int      // records per segment
	segBytes int64    // bytes per segment, a multiple of the page size
	segs     [][]byte // mapped segments
}

// newSpill creates the spill file in dir and unlinks it at once, so that
// nothing is left behind if the process dies.
func newSpill(dir string, recBytes int, chunk int64) (*spill, error) {
	segRecs, segBytes := spillGeometry(recBytes, chunk, int64(os.Getpagesize()))
	f, err := os.CreateTemp(dir, "actcache-*.spill")
	if err != nil {
		return nil, fmt.Errorf("spill dir %q: %w", dir, err)
	}
	name := f.Name()
	if err := os.Remove(name); err != nil {
		f.Close()
		return nil, fmt.Errorf("spill file %s: unlink: %w", name, err)
	}
	return &spill{f: f, name: name, recBytes: recBytes, segRecs: segRecs, segBytes: segBytes}, nil
}

// ensure grows the file until it has room for n records.
func (s *spill) ensure(n int) error {
	for len(s.segs)*s.segRecs < n {
		off := int64(len(s.segs)) * s.segBytes
		fd := int(s.f.Fd())
		if err := unix.Ftruncate(fd, off+s.segBytes); err != nil {
			return fmt.Errorf("spill file %s: grow to %d bytes: %w", s.name, off+s.segBytes, err)
		}
		// Reserve the blocks now so that a full disk is an error here
		// rather than a SIGBUS on a later write through the mapping.
		if err := reserve(fd, off, s.segBytes); err != nil {
			_ = unix.Ftruncate(fd, off)
			return fmt.Errorf("spill file %s: reserve %d bytes at %d: %w", s.name, s.segBytes, off, err)
		}
		seg, err := unix.Mmap(fd, off, int(s.segBytes), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			_ = unix.Ftruncate(fd, off)
			return fmt.Errorf("spill file %s: mmap %d bytes at %d: %w", s.name, s.segBytes, off, err)
		}
		s.segs = append(s.segs, seg)
	}
	return nil
}

// record returns the mapped bytes of spill slot i.
func (s *spill) record(i int) []byte {
	seg := s.segs[i/s.segRecs]
	off := (i % s.segRecs) * s.recBytes
	return seg[off : off+s.recBytes]
}

// write encodes rec into slot i, which ensure has made room for.
func (s *spill) write(i int, rec []float32, dt DType) error {
	encode(s.record(i), rec, dt)
	return nil
}

// read decodes slot i into dst.
func (s *spill) read(i int, dst []float32, dt DType) error {
	decode(dst, s.record(i), dt)
	return nil
}

// size returns the file size in bytes.
func (s *spill) size() int64 { return int64(len(s.segs)) * s.segBytes }

// close unmaps every segment and closes the (already unlinked) file.
func (s *spill) close() error {
	var first error
	for _, seg := range s.segs {
		if err := unix.Munmap(seg); err != nil && first == nil {
			first = fmt.Errorf("spill file %s: munmap: %w", s.name, err)
		}
	}
	s.segs = nil
	if err := s.f.Close(); err != nil && first == nil {
		first = fmt.Errorf("spill file %s: %w", s.name, err)
	}
	return first
}
