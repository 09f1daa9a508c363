package dataset

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestIDXDeclaredSize: an IDX file whose header declares 2^30 elements but
// holds a few is refused without allocating the declared size (before: a
// 1 GiB buffer for a 20-byte file).
func TestIDXDeclaredSize(t *testing.T) {
	p := filepath.Join(t.TempDir(), "t10k-images-idx3-ubyte")
	b := []byte{0, 0, 8, 3, 0, 0, 0x40, 0, 0, 0, 0x40, 0, 0, 0, 0x40, 0, 1, 2, 3, 4} // 16384³ elements declared
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := ReadIDX(p, idxImagesMagic)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("declared 2^42 elements: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Errorf("reading a 20-byte file allocated %d bytes", got)
	}
	// 2^30 elements declared (within the element bound), 4 held
	b = []byte{0, 0, 8, 3, 0, 0, 0x04, 0, 0, 0, 0x04, 0, 0, 0, 0x04, 0, 1, 2, 3, 4}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&before)
	_, _, err = ReadIDX(p, idxImagesMagic)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "holds 4") {
		t.Errorf("declared 2^30 elements, 4 held: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Errorf("reading a 20-byte file declaring 2^30 bytes allocated %d bytes", got)
	}
}
