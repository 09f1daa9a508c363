package actcache

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// savedCache writes a cache of n records of recLen values (dtype dt) to a
// file in a temporary directory and returns its path.
func savedCache(t testing.TB, recLen, n int, dt DType, fingerprint string) string {
	t.Helper()
	c, err := New(Options{RecordLen: recLen, MemoryBudget: int64(recLen * 4), SpillDir: t.TempDir(), DType: dt})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range n {
		if _, err := c.Put(Key("img", i), testRecord(recLen, uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "prefix.actcache")
	if err := c.Save(path, fingerprint); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSaveOpen(t *testing.T) {
	const recLen, n, fp = 200, 5, "vit-b16 sha256:abc l=6 resize224 augment=none"
	for _, dt := range []DType{Float32, BFloat16} {
		t.Run(dt.String(), func(t *testing.T) {
			path := savedCache(t, recLen, n, dt, fp)
			// Reference: what the original cache returns (bf16 is lossy, so
			// compare with a fresh bf16 cache, not with testRecord).
			ref, err := New(Options{RecordLen: recLen, MemoryBudget: 1 << 20, DType: dt})
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			for i := range n {
				if _, err := ref.Put(Key("img", i), testRecord(recLen, uint64(i))); err != nil {
					t.Fatal(err)
				}
			}
			for _, budget := range []int64{0, 2 * recLen * 4, 1 << 20} {
				c, err := Open(path, fp, Options{MemoryBudget: budget, SpillDir: t.TempDir(), DType: dt})
				if err != nil {
					t.Fatalf("Open budget %d: %v", budget, err)
				}
				if c.Len() != n || c.RecordLen() != recLen {
					t.Fatalf("Open budget %d: Len %d RecordLen %d", budget, c.Len(), c.RecordLen())
				}
				got, want := make([]float32, recLen), make([]float32, recLen)
				for i := range n {
					idx, ok := c.Lookup(Key("img", i))
					if !ok || idx != i {
						t.Fatalf("Lookup %d = %d, %v", i, idx, ok)
					}
					if err := c.Get(i, got); err != nil {
						t.Fatal(err)
					}
					if err := ref.Get(i, want); err != nil {
						t.Fatal(err)
					}
					if j := sameBits(got, want); j >= 0 {
						t.Fatalf("budget %d: record %d differs at %d", budget, i, j)
					}
				}
				c.Close()
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	const recLen, fp = 16, "model-1"
	path := savedCache(t, recLen, 3, Float32, fp)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	write := func(b []byte) string {
		p := filepath.Join(t.TempDir(), "bad")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	badMagic := bytes.Clone(data)
	badMagic[0] = 'X'
	tests := []struct {
		name        string
		path, fp    string
		opts        Options
		wantIs      error
		wantMessage string
	}{
		{"fingerprint", path, "model-2", Options{}, ErrFingerprint, "model-1"},
		{"record length", path, fp, Options{RecordLen: 17}, ErrRecordLen, "17"},
		{"dtype", path, fp, Options{DType: BFloat16}, nil, "Options.DType"},
		{"truncated", write(data[:len(data)-5]), fp, Options{}, nil, "record 2"},
		{"trailing", write(append(bytes.Clone(data), 0)), fp, Options{}, nil, "trailing"},
		{"magic", write(badMagic), fp, Options{}, nil, "not an actcache file"},
		{"empty", write(nil), fp, Options{}, nil, "header"},
		{"missing", filepath.Join(t.TempDir(), "none"), fp, Options{}, os.ErrNotExist, "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Open(tt.path, tt.fp, tt.opts)
			if err == nil {
				c.Close()
				t.Fatal("Open succeeded")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v, want %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantMessage) {
				t.Errorf("error %q does not mention %q", err, tt.wantMessage)
			}
		})
	}
}

func TestSaveLeavesNoTemp(t *testing.T) {
	path := savedCache(t, 8, 2, Float32, "fp")
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != filepath.Base(path) {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only %s", names, filepath.Base(path))
	}
}

func FuzzOpen(f *testing.F) {
	path := savedCache(f, 4, 2, Float32, "fp")
	data, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add(data[:40])
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "fuzz")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := Open(p, "fp", Options{MemoryBudget: 1 << 16, SpillDir: dir})
		if err != nil {
			return
		}
		defer c.Close()
		dst := make([]float32, c.RecordLen())
		for i := range c.Len() {
			if err := c.Get(i, dst); err != nil {
				t.Fatalf("Get(%d) of an opened cache: %v", i, err)
			}
		}
	})
}
