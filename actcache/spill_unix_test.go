//go:build unix && !actcache_nommap

package actcache

import (
	"os"
	"testing"
)

// TestSpillFileUnlinked checks that the spill file never shows in its
// directory, so a crash leaves nothing behind, and that the records in it
// are still readable.
func TestSpillFileUnlinked(t *testing.T) {
	dir := t.TempDir()
	c, err := New(Options{RecordLen: 1024, SpillDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	rec := testRecord(1024, 3)
	if _, err := c.Put("a", rec); err != nil {
		t.Fatal(err)
	}
	if _, disk := c.Bytes(); disk == 0 {
		t.Fatal("budget 0 but nothing on disk")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("spill dir holds %s while the cache is open", entries[0].Name())
	}
	got := make([]float32, 1024)
	if err := c.Get(0, got); err != nil {
		t.Fatal(err)
	}
	if j := sameBits(got, rec); j >= 0 {
		t.Errorf("spilled record differs at %d", j)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
