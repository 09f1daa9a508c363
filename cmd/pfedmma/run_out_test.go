package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOutWithoutRunGetsNoResumeHint: a fresh run into a folder that is not
// empty but holds no pfedmma run (/proc, a user's folder) is refused
// without the "--resume … --force" hint, which would only be refused in
// turn; a run from before the marker files gets --resume alone.
func TestOutWithoutRunGetsNoResumeHint(t *testing.T) {
	model := tinyWorldModel(t)
	user := t.TempDir()
	if err := os.WriteFile(filepath.Join(user, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"/proc", user} {
		_, err := execute(t, tinyRunArgs(model, dir, 1)...)
		if err == nil {
			t.Fatalf("run --out %s: accepted", dir)
		}
		if msg := err.Error(); !strings.Contains(msg, "holds no pfedmma run") || strings.Contains(msg, "--resume") || strings.Contains(msg, "--force") {
			t.Errorf("run --out %s: error %q, want no --resume/--force hint", dir, msg)
		}
	}
	old := t.TempDir()
	if err := os.WriteFile(filepath.Join(old, "fingerprint.txt"), []byte("abc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := execute(t, tinyRunArgs(model, old, 1)...)
	if err == nil || !strings.Contains(err.Error(), "--resume") || strings.Contains(err.Error(), "--force to clear") {
		t.Errorf("run --out (a run from before the marker files): error %v, want --resume alone", err)
	}
}
