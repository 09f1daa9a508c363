package atomicfile

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteRefusesFolder: writing over an existing folder is refused up
// front naming it, and leaves no temporary file (before: "rename …: file
// exists" after the whole output was computed and written).
func TestWriteRefusesFolder(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "out.safetensors")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	called := false
	err := Write(target, func(io.Writer) error { called = true; return nil })
	if err == nil || !strings.Contains(err.Error(), target) || !strings.Contains(err.Error(), "folder") {
		t.Fatalf("error %v, want one naming the folder %s", err, target)
	}
	if called {
		t.Error("the content was computed before the refusal")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("left %d entries in %s, want only the folder", len(entries), dir)
	}
	if err := WriteBytes(filepath.Join(dir, "file"), []byte("x")); err != nil {
		t.Fatal(err)
	}
}
