package inputfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRefusesFIFO: a FIFO is refused without blocking; regular files and
// symlinks to them pass.
func TestRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	for name, f := range map[string]func(string) error{
		"Check": Check, "CheckAny": CheckAny,
		"Open":     func(p string) error { _, err := Open(p); return err },
		"ReadFile": func(p string) error { _, err := ReadFile(p); return err },
	} {
		if err := f(fifo); err == nil || !strings.Contains(err.Error(), "FIFO") {
			t.Errorf("%s(fifo) = %v, want an error naming a FIFO", name, err)
		}
	}
	if err := Check("/dev/null"); err == nil {
		t.Error("Check(/dev/null) accepted a device")
	}
	if err := Check(dir); err == nil {
		t.Error("Check(folder) accepted a folder")
	}
	// a FIFO no loader opens (no model or vocabulary ending) is not blamed;
	// one under a model file's name is
	if err := CheckAny(dir); err != nil {
		t.Errorf("CheckAny(folder holding an unrelated FIFO %q) = %v", fifo, err)
	}
	modelFIFO := filepath.Join(dir, "model.safetensors")
	if err := syscall.Mkfifo(modelFIFO, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckAny(dir); err == nil || !strings.Contains(err.Error(), "model.safetensors") {
		t.Errorf("CheckAny(folder holding model.safetensors as a FIFO) = %v, want an error naming it", err)
	}
	if err := os.Remove(modelFIFO); err != nil {
		t.Fatal(err)
	}
	clean := t.TempDir()
	if err := os.WriteFile(filepath.Join(clean, "a"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckAny(clean); err != nil {
		t.Errorf("CheckAny(folder) = %v", err)
	}
	reg := filepath.Join(dir, "f.txt")
	if err := os.WriteFile(reg, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(reg, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{reg, link} {
		if b, err := ReadFile(p); err != nil || string(b) != "x" {
			t.Errorf("ReadFile(%s) = %q, %v", p, b, err)
		}
	}
}
