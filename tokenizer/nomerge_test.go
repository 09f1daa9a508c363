package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadRefusesVocabWithoutMerges: a file with one line (any text, JSON,
// junk) and no merge after it is not a BPE vocabulary (before: accepted as
// an empty one, and tokenize printed byte-level ids with exit 0).
func TestLoadRefusesVocabWithoutMerges(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"json.txt":   `{"x": [1, 2, {"y": null}], "round": "five"}`,
		"header.txt": "\"bpe_simple_vocab_16e6.txt#version: 0.2\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "merge") {
			t.Errorf("%s: error %v, want one naming the file and the missing merges", name, err)
		}
	}
	p := filepath.Join(dir, "ok.txt")
	if err := os.WriteFile(p, []byte("#version: 0.2\nt h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err != nil {
		t.Errorf("one merge: %v", err)
	}
}
