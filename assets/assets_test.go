package assets

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/pretrain"
	"github.com/pfedmma/pfedmma/tokenizer"
	"github.com/pfedmma/pfedmma/world"
)

// maxShippedBytes is the size budget of the embedded model folder.
const maxShippedBytes = 20 << 20

func TestShippedSize(t *testing.T) {
	var total int64
	err := fs.WalkDir(DefaultModelFS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		total += info.Size()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if total == 0 || total > maxShippedBytes {
		t.Fatalf("shipped model folder is %d bytes, want 1..%d", total, maxShippedBytes)
	}
}

func TestMaterializeReusesAndRepairs(t *testing.T) {
	root := t.TempDir()
	dir, err := Materialize(root)
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, pretrain.ModelFile)
	before, err := os.Stat(model)
	if err != nil {
		t.Fatal(err)
	}
	// A second call reuses the intact files.
	if again, err := Materialize(root); err != nil || again != dir {
		t.Fatalf("second call: %q, %v; want %q", again, err, dir)
	}
	if after, _ := os.Stat(model); !os.SameFile(before, after) {
		t.Error("an intact file was rewritten")
	}
	// Damaged and missing files are restored.
	if err := os.WriteFile(model, []byte("damaged"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, tokenizer.SimpleVocabGz)); err != nil {
		t.Fatal(err)
	}
	if _, err := Materialize(root); err != nil {
		t.Fatal(err)
	}
	want, err := fs.ReadFile(DefaultModelFS(), pretrain.ModelFile)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(model)
	if err != nil || string(got) != string(want) {
		t.Fatalf("repaired model: %d bytes (%v), want the %d embedded bytes", len(got), err, len(want))
	}
	if _, err := tokenizer.FindVocab(dir); err != nil {
		t.Fatalf("vocabulary not restored: %v", err)
	}
	// An unwritable root is an error, not a panic.
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Materialize(file); err == nil {
		t.Fatal("materialising under a regular file succeeded")
	}
}

// TestDefaultModelZeroShot loads the shipped model through the ordinary
// loaders and checks zero-shot accuracy on held-out compositions, which
// pretraining never showed, against the accuracy recorded at training time:
// by the class token (pretrain.EvalWorld) and by the mean of the patch
// tokens (pretrain.EvalWorldPatches; the dense pretraining term aligned
// them with the captions, which FedOTP's patch-to-prompt matching needs).
func TestDefaultModelZeroShot(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	dir, err := DefaultModelDir()
	if err != nil {
		t.Fatal(err)
	}
	w, info, err := checkpoint.Load(filepath.Join(dir, ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	vp, err := tokenizer.FindVocab(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(vp)
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != info.Config.Text.VocabSize {
		t.Fatalf("vocabulary has %d ids, model %d", tok.VocabSize(), info.Config.Text.VocabSize)
	}
	var rep pretrain.Result
	b, err := os.ReadFile(filepath.Join(dir, pretrain.ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Config != w.Config {
		t.Fatalf("report config %+v, loaded %+v", rep.Config, w.Config)
	}
	wd, err := world.New(rep.Options.WorldConfig())
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	evals := []struct {
		name string
		eval func(context.Context, *clip.Model, *tokenizer.Tokenizer, *world.World, []world.Composition, []world.Composition, int, string) (pretrain.ZeroShot, error)
		min  float64
	}{
		{"class token", pretrain.EvalWorld, minNovelTop1},
		{"patch tokens", pretrain.EvalWorldPatches, minNovelPatchTop1},
	}
	for _, seed := range []uint64{1, 2} {
		// ChooseClasses puts held-out compositions in the second half.
		classes, err := wd.ChooseClasses(20, seed)
		if err != nil {
			t.Fatal(err)
		}
		novel := classes[10:]
		for _, c := range novel {
			if !wd.IsHeldOut(c) {
				t.Fatalf("class %q is not held out", c.Name())
			}
		}
		for _, e := range evals {
			res, err := e.eval(context.Background(), m, tok, wd, novel, novel, 8, pretrain.PromptTemplates[0])
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("seed %d, %s: held-out 10-way zero-shot top-1 %.3f over %d images", seed, e.name, res.Top1, res.Images)
			if res.Top1 < e.min {
				t.Errorf("seed %d, %s: held-out 10-way zero-shot top-1 %.3f, want ≥ %.2f (chance %.2f)", seed, e.name, res.Top1, e.min, res.Chance)
			}
		}
	}
}

func TestLoadDefault(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	w, tok, err := LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Tokenize("a photo of a solid red circle.", w.Config.Text.ContextLength, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := clip.New(w).EncodeText(ids, 1); err != nil {
		t.Fatalf("encoding a prompt with the default model: %v", err)
	}
}
