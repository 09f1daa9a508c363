package dataset

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/preprocess"
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

// TestLEAFManyUsersLinear: a LEAF file of 200k users is read in linear
// time (before: the user check was quadratic, 150k users took 59 s), and
// a user listed twice is refused naming the file.
func TestLEAFManyUsersLinear(t *testing.T) {
	const users = 200000
	root := t.TempDir()
	write := func(rel string, names []string, withImage string) {
		var sb strings.Builder
		sb.WriteString(`{"users": [`)
		for i, n := range names {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, "%q", n)
		}
		sb.WriteString(`], "num_samples": [`)
		for i, n := range names {
			if i > 0 {
				sb.WriteByte(',')
			}
			if n == withImage {
				sb.WriteByte('1')
			} else {
				sb.WriteByte('0')
			}
		}
		sb.WriteString(`], "user_data": {`)
		img := "[" + strings.TrimSuffix(strings.Repeat("0.5,", 28*28), ",") + "]"
		for i, n := range names {
			if i > 0 {
				sb.WriteByte(',')
			}
			if n == withImage {
				fmt.Fprintf(&sb, `%q: {"x": [%s], "y": [3]}`, n, img)
			} else {
				fmt.Fprintf(&sb, `%q: {"x": [], "y": []}`, n)
			}
		}
		sb.WriteString("}}")
		p := filepath.Join(root, "femnist", "data", rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	names := make([]string, users)
	for i := range names {
		names[i] = fmt.Sprintf("f%07d", i)
	}
	write("train/a.json", names, names[users-1])
	write("test/a.json", []string{"f0000000"}, "f0000000")
	start := time.Now()
	ds, err := Load("femnist", root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("reading %d users took %v", users, d)
	}
	if len(ds.Domains) != 2 || len(ds.Train) != 1 || len(ds.Test) != 1 {
		t.Errorf("domains %d, train %d, test %d", len(ds.Domains), len(ds.Train), len(ds.Test))
	}
	write("test/a.json", []string{"f0000000", "f0000000"}, "f0000000")
	if _, err := Load("femnist", root, Options{}); err == nil || !strings.Contains(err.Error(), "listed twice") || !strings.Contains(err.Error(), "test/a.json") {
		t.Errorf("a user listed twice: %v", err)
	}
}

// TestHugeImageFileRefused: a dataset image file over
// preprocess.MaxFileBytes is refused naming it before it is read (a sparse
// file: no disk is used).
func TestHugeImageFileRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "huge.png")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(preprocess.MaxFileBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = FileSource{Path: p}.Load()
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("huge image: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("refusing it allocated %d bytes", got)
	}
	if _, err := preprocess.Decode(p); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("preprocess.Decode of a huge file: %v", err)
	}
}

// TestIDXDeclaredSize: an IDX file whose header declares 2^30 elements but
// holds a few is refused without allocating the declared size (before: a
// 1 GiB buffer for a 20-byte file).
func TestIDXDeclaredSize(t *testing.T) {
	p := filepath.Join(t.TempDir(), "t10k-images-idx3-ubyte")
	b := []byte{0, 0, 8, 3, 0, 0, 0x40, 0, 0, 0, 0x40, 0, 0, 0, 0x40, 0, 1, 2, 3, 4} // 16384³ elements declared
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := ReadIDX(p, idxImagesMagic)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("declared 2^42 elements: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Errorf("reading a 20-byte file allocated %d bytes", got)
	}
	// 2^30 elements declared (within the element bound), 4 held
	b = []byte{0, 0, 8, 3, 0, 0, 0x04, 0, 0, 0, 0x04, 0, 0, 0, 0x04, 0, 1, 2, 3, 4}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&before)
	_, _, err = ReadIDX(p, idxImagesMagic)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "holds 4") {
		t.Errorf("declared 2^30 elements, 4 held: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
		t.Errorf("reading a 20-byte file declaring 2^30 bytes allocated %d bytes", got)
	}
}
