package actcache

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// File format written by Save (header fields little-endian):
//
//	magic      [8]byte  "ACTCACH1"
//	order      uint8    'L' or 'B': byte order of the record data
//	dtype      uint8    DType
//	recordLen  uint64
//	n          uint64   number of records
//	fpLen      uint32, fingerprint [fpLen]byte
//	n × (keyLen uint32, key [keyLen]byte)   in record-index order
//	n × record (recordLen × dtype size bytes, in the stated byte order)
const magic = "ACTCACH1"

// Limits that keep a corrupt header from causing huge allocations.
const (
	maxFingerprint = 1 << 20
	maxKey         = 1 << 16
)

// ErrFingerprint is returned by Open when the file was saved with another
// fingerprint (another model, prefix depth or preprocessing).
var ErrFingerprint = errors.New("actcache: fingerprint mismatch")

// nativeOrder returns 'L' on little-endian hosts and 'B' on big-endian ones.
func nativeOrder() byte {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], 1)
	if b[0] == 1 {
		return 'L'
	}
	return 'B'
}

// Save writes every record and key to path together with fingerprint, a
// string the caller builds from everything the records depend on (for
// example model weights hash, prefix depth ℓ, preprocessing and
// augmentation). The file is written next to path and renamed into place,
// so a crash never leaves a half-written cache at path. Readers may use
// the cache while Save runs; writers wait.
func (c *Cache) Save(path, fingerprint string) (err error) {
	if len(fingerprint) > maxFingerprint {
		return fmt.Errorf("actcache: Save %s: fingerprint is %d bytes, limit %d", path, len(fingerprint), maxFingerprint)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return ErrClosed
	}
	for i, k := range c.keys {
		if len(k) > maxKey {
			return fmt.Errorf("actcache: Save %s: key of record %d is %d bytes, limit %d", path, i, len(k), maxKey)
		}
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("actcache: Save %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	var hdr []byte
	hdr = append(hdr, magic...)
	hdr = append(hdr, nativeOrder(), byte(c.dtype))
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(c.recLen))
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(len(c.keys)))
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(fingerprint)))
	hdr = append(hdr, fingerprint...)
	for _, k := range c.keys {
		hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(k)))
		hdr = append(hdr, k...)
	}
	if _, err := w.Write(hdr); err != nil {
		return fmt.Errorf("actcache: Save %s: header: %w", path, err)
	}
	rec := make([]float32, c.recLen)
	raw := newSlot(c.recBytes)
	for i, l := range c.locs {
		if err := c.readLocked(l, rec); err != nil {
			return fmt.Errorf("actcache: Save %s: record %d: %w", path, i, err)
		}
		encode(raw, rec, c.dtype)
		if _, err := w.Write(raw); err != nil {
			return fmt.Errorf("actcache: Save %s: record %d: %w", path, i, err)
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("actcache: Save %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("actcache: Save %s: sync: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("actcache: Save %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("actcache: Save %s: %w", path, err)
	}
	return nil
}

// Open loads a cache written by Save into a new cache configured by opts,
// placing records in RAM and the spill file as New would. It refuses
// (with ErrFingerprint) a file saved with another fingerprint. opts.RecordLen
// may be 0 to take the file's; otherwise it, and opts.DType, must match the
// file.
func Open(path, fingerprint string, opts Options) (_ *Cache, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("actcache: Open: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("actcache: Open %s: %w", path, err)
	}
	r := bufio.NewReaderSize(f, 1<<20)
	hdr := make([]byte, len(magic)+2+8+8+4)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, fmt.Errorf("actcache: Open %s: header: %w", path, err)
	}
	if string(hdr[:len(magic)]) != magic {
		return nil, fmt.Errorf("actcache: Open %s: magic %q: not an actcache file", path, hdr[:len(magic)])
	}
	p := hdr[len(magic):]
	order, dtype := p[0], DType(p[1])
	recLen := binary.LittleEndian.Uint64(p[2:])
	n := binary.LittleEndian.Uint64(p[10:])
	fpLen := binary.LittleEndian.Uint32(p[18:])
	if fpLen > maxFingerprint {
		return nil, fmt.Errorf("actcache: Open %s: fingerprint length %d: limit %d", path, fpLen, maxFingerprint)
	}
	fp := make([]byte, fpLen)
	if _, err := io.ReadFull(r, fp); err != nil {
		return nil, fmt.Errorf("actcache: Open %s: fingerprint: %w", path, err)
	}
	if string(fp) != fingerprint {
		return nil, fmt.Errorf("actcache: Open %s: file fingerprint %q, want %q: %w", path, fp, fingerprint, ErrFingerprint)
	}
	if order != nativeOrder() {
		return nil, fmt.Errorf("actcache: Open %s: byte order %q, this host uses %q", path, order, nativeOrder())
	}
	if dtype != Float32 && dtype != BFloat16 {
		return nil, fmt.Errorf("actcache: Open %s: dtype %d: unknown", path, dtype)
	}
	if dtype != opts.DType {
		return nil, fmt.Errorf("actcache: Open %s: file stores %v, Options.DType is %v", path, dtype, opts.DType)
	}
	if recLen == 0 || recLen > uint64(fi.Size()) {
		return nil, fmt.Errorf("actcache: Open %s: record length %d: file has %d bytes", path, recLen, fi.Size())
	}
	if opts.RecordLen == 0 {
		opts.RecordLen = int(recLen)
	} else if uint64(opts.RecordLen) != recLen {
		return nil, fmt.Errorf("actcache: Open %s: file record length %d, Options.RecordLen %d: %w", path, recLen, opts.RecordLen, ErrRecordLen)
	}
	recBytes := recLen * uint64(dtype.size())
	if n > uint64(fi.Size())/recBytes {
		return nil, fmt.Errorf("actcache: Open %s: %d records of %d bytes: file has only %d bytes", path, n, recBytes, fi.Size())
	}
	keys := make([]string, n)
	var lenBuf [4]byte
	for i := range keys {
		if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
			return nil, fmt.Errorf("actcache: Open %s: key %d: %w", path, i, err)
		}
		kl := binary.LittleEndian.Uint32(lenBuf[:])
		if kl > maxKey {
			return nil, fmt.Errorf("actcache: Open %s: key %d: length %d: limit %d", path, i, kl, maxKey)
		}
		kb := make([]byte, kl)
		if _, err := io.ReadFull(r, kb); err != nil {
			return nil, fmt.Errorf("actcache: Open %s: key %d: %w", path, i, err)
		}
		keys[i] = string(kb)
	}
	c, err := New(opts)
	if err != nil {
		return nil, fmt.Errorf("actcache: Open %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	raw := newSlot(c.recBytes)
	rec := make([]float32, c.recLen)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, k := range keys {
		if _, ok := c.index[k]; ok {
			return nil, fmt.Errorf("actcache: Open %s: key %q repeated at record %d", path, k, i)
		}
		if _, err := io.ReadFull(r, raw); err != nil {
			return nil, fmt.Errorf("actcache: Open %s: record %d: %w", path, i, err)
		}
		decode(rec, raw, c.dtype)
		if _, err := c.putLocked(k, rec); err != nil {
			return nil, fmt.Errorf("actcache: Open %s: record %d: %w", path, i, err)
		}
	}
	if _, err := r.ReadByte(); err != io.EOF {
		return nil, fmt.Errorf("actcache: Open %s: trailing data after %d records", path, n)
	}
	return c, nil
}
