package runfiles

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzReadInfo: ReadInfo never panics; what it accepts has classes
// and label spaces, and survives a JSON round trip unchanged.
func FuzzReadInfo(f *testing.F) {
	f.Add([]byte(`{"model": "/m/ViT-B-16.pt", "vocab": "v.txt.gz", "template": "a photo of a {}.", "dataset": "caltech101",
 "protocol": "base2novel", "classes": ["face", "leopard"], "spaces": [{"name": "base", "classes": [0]}, {"name": "novel", "classes": [1]}],
 "client_space": {"0": 0, "1": 1}, "adapters": {}}`))
	f.Add([]byte(`{"classes": ["a"], "spaces": []}`))
	f.Add([]byte(`{"classes": ["a"], "spaces": [{"classes": [5]}], "client_space": {"x": 1}}`))
	f.Add([]byte(`null`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, InfoFile)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		info, err := ReadInfo(dir)
		if err != nil {
			if !strings.Contains(err.Error(), dir) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if len(info.Classes) == 0 || len(info.Spaces) == 0 {
			t.Fatalf("accepted %+v without classes or spaces", info)
		}
		again, err := json.Marshal(info)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, again, 0o644); err != nil {
			t.Fatal(err)
		}
		back, err := ReadInfo(dir)
		if err != nil {
			t.Fatalf("re-encoded run.json does not read: %v", err)
		}
		if !reflect.DeepEqual(back, info) {
			t.Fatalf("round trip: %+v, had %+v", back, info)
		}
	})
}
