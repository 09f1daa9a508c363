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

// TestInspectRefusesFIFO: inspect on a FIFO (or a model folder holding one)
// fails at once (before: it blocked forever, deaf to Ctrl-C).
func TestInspectRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "model.safetensors")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	for _, p := range []string{fifo, dir} {
		done := make(chan error, 1)
		go func() { _, err := execute(t, "inspect", "--model", p); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "FIFO") {
				t.Errorf("inspect --model %s: error %v, want one naming the FIFO", p, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("inspect --model %s blocked", p)
		}
	}
}

// TestInspectWithoutModel: inspect with no --model describes the embedded
// model, as the README says (before: "required flag(s) "model" not set").
func TestInspectWithoutModel(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	out, err := execute(t, "inspect")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"embedded default model", "parameters", "vision"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
}
