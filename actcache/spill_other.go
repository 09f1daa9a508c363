//go:build !unix || actcache_nommap

package actcache

import (
	"fmt"
	"os"
)

// spill is the overflow store on systems without golang.org/x/sys/unix
// (or when built with -tags actcache_nommap): a temporary file read and
// written with ReadAt/WriteAt, deleted on close. The file stays visible
// while the cache is open, since not every such system can unlink an open
// file.
type spill struct {
	f        *os.File
	name     string
	recBytes int
	segRecs  int
	segBytes int64
	nsegs    int
}

// newSpill creates the spill file in dir.
func newSpill(dir string, recBytes int, chunk int64) (*spill, error) {
	segRecs, segBytes := spillGeometry(recBytes, chunk, int64(os.Getpagesize()))
	f, err := os.CreateTemp(dir, "actcache-*.spill")
	if err != nil {
		return nil, fmt.Errorf("spill dir %q: %w", dir, err)
	}
	return &spill{f: f, name: f.Name(), recBytes: recBytes, segRecs: segRecs, segBytes: segBytes}, nil
}

// ensure grows the file until it has room for n records.
func (s *spill) ensure(n int) error {
	for s.nsegs*s.segRecs < n {
		size := int64(s.nsegs+1) * s.segBytes
		if err := s.f.Truncate(size); err != nil {
			return fmt.Errorf("spill file %s: grow to %d bytes: %w", s.name, size, err)
		}
		s.nsegs++
	}
	return nil
}

// offset returns the file offset of slot i.
func (s *spill) offset(i int) int64 {
	return int64(i/s.segRecs)*s.segBytes + int64(i%s.segRecs)*int64(s.recBytes)
}

// write encodes rec into slot i.
func (s *spill) write(i int, rec []float32, dt DType) error {
	buf := f32Bytes(rec)
	if dt != Float32 {
		buf = newSlot(s.recBytes)
		encode(buf, rec, dt)
	}
	if _, err := s.f.WriteAt(buf, s.offset(i)); err != nil {
		return fmt.Errorf("spill file %s: write record %d: %w", s.name, i, err)
	}
	return nil
}

// read decodes slot i into dst.
func (s *spill) read(i int, dst []float32, dt DType) error {
	buf := f32Bytes(dst)
	if dt != Float32 {
		buf = newSlot(s.recBytes)
	}
	if _, err := s.f.ReadAt(buf, s.offset(i)); err != nil {
		return fmt.Errorf("spill file %s: read record %d: %w", s.name, i, err)
	}
	if dt != Float32 {
		decode(dst, buf, dt)
	}
	return nil
}

// size returns the file size in bytes.
func (s *spill) size() int64 { return int64(s.nsegs) * s.segBytes }

// close closes and deletes the file.
func (s *spill) close() error {
	err := s.f.Close()
	if rerr := os.Remove(s.name); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("spill file %s: %w", s.name, err)
	}
	return nil
}
