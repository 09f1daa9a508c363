package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goIdentInError matches an error string naming a Go field (Options.X,
// Config.X) or a CamelCase identifier followed by its value ("Size 7 not
// in", "RecordLen = 3", "PretrainDomains[2] = 9").
var goIdentInError = regexp.MustCompile(`(Errorf|errors\.New)\("[^"]*(\b(Options|Config|Settings|Opts)\.[A-Z]|\b[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*(\[%d\])? ?(=|%|not in)|\bSize %d)`)

// TestErrorsSpeakUserVocabulary: no error message of the program names a
// Go field where the user wrote a config key, a flag or a file (before:
// "Size 7 not in [8, 1024]", "Options.SpillDir", gating_embed_dim for
// pfedmoap.gate_width).
func TestErrorsSpeakUserVocabulary(t *testing.T) {
	root := "../.."
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "shared" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		for i, line := range strings.Split(string(b), "\n") {
			if m := goIdentInError.FindString(line); m != "" {
				t.Errorf("%s:%d: error message names a Go identifier: %s", path, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 50 {
		t.Fatalf("only %d Go files scanned under %s", n, root)
	}
	for _, msg := range []string{`fmt.Errorf("world: Size %d not in [8, 1024]: %w"`, `fmt.Errorf("actcache: Options.SpillDir %q: %w"`} {
		if !goIdentInError.MatchString(msg) {
			t.Errorf("the check misses %s", msg)
		}
	}
}
