package dataset

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/preprocess"
)

// bombPNG is a valid 1×1 PNG whose header announces w×h pixels.
func bombPNG(t *testing.T, w, h uint32) []byte {
	b := pngBytes(t, 0)
	// IHDR: 8-byte signature, 4-byte length, "IHDR", width, height, ...
	binary.BigEndian.PutUint32(b[16:], w)
	binary.BigEndian.PutUint32(b[20:], h)
	binary.BigEndian.PutUint32(b[29:], crc32.ChecksumIEEE(b[12:29]))
	return b
}

// TestDecompressionBombRefused: a small PNG announcing 100000×100000 pixels
// is refused from its header (before: dataset loading allocated the
// pixels, 3.2 GB for a 60000² PNG, and could run out of memory).
func TestDecompressionBombRefused(t *testing.T) {
	p := writeFile(t, t.TempDir(), "bomb.png", bombPNG(t, 100000, 100000))
	_, err := FileSource{Path: p}.Load()
	if err == nil || !strings.Contains(err.Error(), "out of range") || !strings.Contains(err.Error(), "bomb.png") {
		t.Fatalf("bomb: error %v, want the pixel limit naming the file", err)
	}
}

// TestImageFIFORefused: an image path that is a FIFO is refused at once
// instead of blocking forever.
func TestImageFIFORefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "pipe.png")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, err := (FileSource{Path: p}).Load(); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("FIFO image: error %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("loading a FIFO image blocked")
	}
}

// TestHugeImageFileRefused: a dataset image file over
// preprocess.MaxFileBytes is refused naming it before it is read (a sparse
// file: no disk is used).
func TestHugeImageFileRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "huge.png")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(preprocess.MaxFileBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = FileSource{Path: p}.Load()
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("huge image: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("refusing it allocated %d bytes", got)
	}
	if _, err := preprocess.Decode(p); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("preprocess.Decode of a huge file: %v", err)
	}
}
