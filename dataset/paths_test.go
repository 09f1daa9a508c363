package dataset

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeDTD writes a CoOp DTD folder whose split lists the given train
// entries (and one good val and test image).
func writeDTD(t *testing.T, train ...string) string {
	t.Helper()
	root := t.TempDir()
	dsDir := filepath.Join(root, "dtd")
	for _, f := range []string{"a", "v", "t"} {
		writeFile(t, filepath.Join(dsDir, "images"), "banded/"+f+".png", pngBytes(t, 1))
	}
	var rows []string
	for _, p := range train {
		rows = append(rows, fmt.Sprintf("[%q, 0, \"banded\"]", p))
	}
	js := fmt.Sprintf(`{"train": [%s], "val": [["banded/v.png", 0, "banded"]], "test": [["banded/t.png", 0, "banded"]]}`, strings.Join(rows, ","))
	writeFile(t, dsDir, "split_zhou_DescribableTextures.json", []byte(js))
	return root
}

// TestSplitEntriesStayInRoot: a CoOp split entry with ../ (or an absolute
// path) is refused at load naming the split file and entry (before: the
// file outside the dataset was read); an entry that is a symlink leading
// outside is refused when opened.
func TestSplitEntriesStayInRoot(t *testing.T) {
	outside := writeFile(t, t.TempDir(), "secret.png", pngBytes(t, 9))
	for _, bad := range []string{"../../../" + filepath.Base(outside), "banded/../../x.png", "/etc/passwd"} {
		root := writeDTD(t, "banded/a.png", bad)
		_, err := Load("dtd", root, Options{})
		if err == nil || !strings.Contains(err.Error(), "split_zhou_DescribableTextures.json") ||
			!strings.Contains(err.Error(), "train") || !strings.Contains(err.Error(), bad) {
			t.Errorf("entry %q: error %v, want one naming the split file and entry", bad, err)
		}
	}
	root := writeDTD(t, "banded/a.png", "banded/link.png")
	if err := os.Symlink(outside, filepath.Join(root, "dtd", "images", "banded", "link.png")); err != nil {
		t.Fatal(err)
	}
	d, err := Load("dtd", root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Train[0].Source.Load(); err != nil {
		t.Errorf("good entry: %v", err)
	}
	if _, err := d.Train[1].Source.Load(); err == nil || !strings.Contains(err.Error(), "outside the dataset folder") {
		t.Errorf("symlink leaving the dataset: error %v", err)
	}
	// A symlink inside the images folder is fine.
	root = writeDTD(t, "banded/a.png", "banded/inside.png")
	if err := os.Symlink("a.png", filepath.Join(root, "dtd", "images", "banded", "inside.png")); err != nil {
		t.Fatal(err)
	}
	if d, err = Load("dtd", root, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Train[1].Source.Load(); err != nil {
		t.Errorf("symlink inside the dataset: %v", err)
	}
}

// TestFedBNEntriesStayInRoot: the same for FedBN list files.
func TestFedBNEntriesStayInRoot(t *testing.T) {
	root := t.TempDir()
	for _, site := range OfficeCaltech10Sites {
		for _, sp := range []string{"train", "test"} {
			writeFile(t, filepath.Join(root, "office_caltech_10"), site+"_"+sp+".txt", []byte("../outside.png back_pack\n"))
		}
	}
	if _, err := Load("office_caltech10", root, Options{}); err == nil || !strings.Contains(err.Error(), "inside the dataset folder") {
		t.Errorf("FedBN entry ../outside.png: error %v", err)
	}
}
