package runfiles

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/pfedmma/pfedmma/protocol"
)

// TestWriteInfoReads: WriteInfo records the model's SHA-256 (computed here
// with crypto/sha256, not ModelDigest) and writes a model inside the run
// folder relative to it; ReadInfo reads back what was written.
func TestWriteInfoReads(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m.safetensors")
	body := []byte("not really a model")
	if err := os.WriteFile(model, body, 0o644); err != nil {
		t.Fatal(err)
	}
	info := Info{Model: model, Template: "a photo of a {}.", Dataset: "world", Protocol: protocol.BaseToNovel,
		Classes: []string{"a", "b"}, Spaces: []protocol.Space{{Name: "base", Classes: []int{0}}, {Name: "novel", Classes: []int{1}}},
		ClientSpace: map[int]int{0: 0}, Methods: []string{"promptfl"}, Sites: map[string]string{"promptfl": SitesFolder("promptfl")}}
	if err := WriteInfo(dir, info); err != nil {
		t.Fatal(err)
	}
	got, err := ReadInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	if got.ModelSHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("model_sha256 %q, want the file's SHA-256", got.ModelSHA256)
	}
	if got.Model != "m.safetensors" || ResolvePath(dir, got.Model) != model {
		t.Errorf("model %q (resolves to %q), want m.safetensors inside the run folder", got.Model, ResolvePath(dir, got.Model))
	}
	if got.Sites["promptfl"] != filepath.Join("sites", "promptfl") || got.ClientSpace[0] != 0 || len(got.Spaces) != 2 {
		t.Errorf("read back %+v", got)
	}
}
