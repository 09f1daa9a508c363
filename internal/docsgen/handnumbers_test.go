package docsgen

import (
	"testing"
)

// TestNoHandWrittenNumbers scans the hand-written docs (ScanDocs) and fails
// on every measured number outside a generated block, by the rule of
// HandNumbers, naming the file, the line and the number.
func TestNoHandWrittenNumbers(t *testing.T) {
	files, err := ScanDocs("../..")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := RenderRows("../../docs")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range HandNumbers(files, rows) {
		t.Error(h)
	}
}
