package dataset

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestCoOpHugeLabel: a split file whose label is 1e9 is refused naming the
// file and the first missing label, without allocating by the label
// (before: a slice of 1e9+1 class names, "fatal error: out of memory").
func TestCoOpHugeLabel(t *testing.T) {
	file := filepath.Join(t.TempDir(), "split_zhou_Caltech101.json")
	data := `{"train": [["a/1.jpg", 0, "a"], ["b/1.jpg", 1000000000, "b"]], "val": [], "test": [["a/2.jpg", 0, "a"]]}`
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := ReadSplitFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = s.classList(file)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "label 1 has no images") {
		t.Errorf("label 1e9: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("checking the labels allocated %d bytes", got)
	}
}
