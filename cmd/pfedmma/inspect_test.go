package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestModelFolderWithoutModelNamesIt: a --model folder holding no model
// file, but a FIFO no loader opens, is refused for the missing model, not
// for the FIFO (before: "pipe: a named pipe (FIFO), not a regular file").
func TestModelFolderWithoutModelNamesIt(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"inspect", "--model", dir}, {"embed", "--model", dir, "--text", "a cat"}} {
		done := make(chan error, 1)
		go func() { _, err := execute(t, args...); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "no .safetensors file") || strings.Contains(err.Error(), "FIFO") {
				t.Errorf("%v: error %v, want one saying the folder holds no model file", args, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%v blocked", args)
		}
	}
}
