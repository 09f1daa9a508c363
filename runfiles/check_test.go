package runfiles

import (
	"path/filepath"
	"strings"
	"testing"
)

// validRunJSON is a run.json as `pfedmma run` writes it.
const validRunJSON = `{
  "model": "/models/tiny",
  "template": "a photo of a {}.",
  "dataset": "world",
  "protocol": "base2novel",
  "classes": ["blue striped heart", "yellow checkered square", "solid orange hexagon", "solid brown triangle"],
  "spaces": [{"name": "base", "classes": [0, 1]}, {"name": "novel", "classes": [2, 3]}],
  "client_space": {"0": 0, "1": 0},
  "methods": ["zeroshot", "pfedmma"],
  "sections": {"pfedmma": "dim: 8\n"},
  "sites": {"pfedmma": "adapters", "zeroshot": "sites/zeroshot"}
}`

// FuzzDecodeInfo: decoding any bytes as run.json never panics, and whatever is
// accepted is safe to use: every class index of every space lies within
// the classes, client IDs run 0..n-1 over valid spaces, the template has
// its class slot and each method has a site folder inside the run.
func FuzzDecodeInfo(f *testing.F) {
	f.Add([]byte(validRunJSON))
	f.Add([]byte(strings.Replace(validRunJSON, "[0, 1]", "[0, 99]", 1)))
	f.Add([]byte(strings.Replace(validRunJSON, `"template": "a photo of a {}.",`, "", 1)))
	f.Add([]byte(strings.Replace(validRunJSON, `"1": 0`, `"2": 0`, 1)))
	f.Add([]byte(strings.Replace(validRunJSON, `"adapters"`, `"../x"`, 1)))
	f.Add([]byte(validRunJSON[:len(validRunJSON)/2]))
	f.Add([]byte(`{"classes": "x"}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := decodeInfo(data)
		if err != nil {
			if info != nil {
				t.Fatalf("error %v with a result", err)
			}
			return
		}
		if !strings.Contains(info.Template, "{}") || len(info.Classes) == 0 || len(info.Methods) == 0 {
			t.Fatalf("accepted %+v", info)
		}
		for _, s := range info.Spaces {
			for _, c := range s.Classes {
				if c < 0 || c >= len(info.Classes) {
					t.Fatalf("accepted class index %d of %d", c, len(info.Classes))
				}
			}
		}
		for id := range len(info.ClientSpace) {
			if sp, ok := info.ClientSpace[id]; !ok || sp < 0 || sp >= len(info.Spaces) {
				t.Fatalf("accepted client %d → space %d (present %v)", id, sp, ok)
			}
		}
		for _, m := range info.Methods {
			if !filepath.IsLocal(info.Sites[m]) {
				t.Fatalf("accepted site folder %q", info.Sites[m])
			}
		}
	})
}

// TestDecodeInfoValid: the run.json `pfedmma run` writes is accepted as
// it is (so the fuzz target's checks are not refusing everything).
func TestDecodeInfoValid(t *testing.T) {
	info, err := decodeInfo([]byte(validRunJSON))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Classes) != 4 || info.Sites["pfedmma"] != "adapters" {
		t.Errorf("decoded %+v", info)
	}
}
