// Package assets ships the pretrained tiny CLIP of `pfedmma pretrain` inside
// the binary and materialises it as an ordinary model folder
// (model.safetensors, bpe_simple_vocab_16e6.txt.gz, vocab.json, merges.txt,
// pretrain.json), so the same checkpoint and tokenizer loaders that read a
// released CLIP read it.
package assets

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"sync"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/tokenizer"
)

// The shipped model, trained by the command in model/pretrain.json.
//
//go:embed model/model.safetensors model/bpe_simple_vocab_16e6.txt.gz model/vocab.json model/merges.txt model/pretrain.json
var modelFiles embed.FS

// modelRoot is the folder of the shipped model inside modelFiles.
const modelRoot = "model"

// Files of the shipped model folder.
const (
	// ModelFile holds the weights (OpenAI names, checkpoint.Load).
	ModelFile = "model.safetensors"
	// ReportFile is pretrain.json: the options, the reproduce command, the
	// training time and the zero-shot accuracy measured after training.
	ReportFile = "pretrain.json"
)

// DefaultModelFS returns the shipped model folder as a read-only file
// system (files at its root).
func DefaultModelFS() fs.FS {
	sub, err := fs.Sub(modelFiles, modelRoot)
	if err != nil { // modelRoot is a valid constant path
		panic(err)
	}
	return sub
}

// fileHash is one embedded file and the SHA-256 of its content.
type fileHash struct {
	name string
	sum  [sha256.Size]byte
}

var (
	hashOnce sync.Once
	hashes   []fileHash
	dirHash  string
	hashErr  error
)

// digest hashes the embedded files once: per file, and the folder as a
// whole (names and contents), which names the cache folder.
func digest() ([]fileHash, string, error) {
	hashOnce.Do(func() {
		entries, err := fs.ReadDir(modelFiles, modelRoot)
		if err != nil {
			hashErr = fmt.Errorf("assets: embedded model: %w", err)
			return
		}
		all := sha256.New()
		for _, e := range entries {
			data, err := modelFiles.ReadFile(path.Join(modelRoot, e.Name()))
			if err != nil {
				hashErr = fmt.Errorf("assets: embedded model %s: %w", e.Name(), err)
				return
			}
			h := fileHash{name: e.Name(), sum: sha256.Sum256(data)}
			hashes = append(hashes, h)
			fmt.Fprintf(all, "%s\x00%x\n", h.name, h.sum)
		}
		sort.Slice(hashes, func(i, j int) bool { return hashes[i].name < hashes[j].name })
		dirHash = hex.EncodeToString(all.Sum(nil))[:16]
	})
	return hashes, dirHash, hashErr
}

// DefaultModelDir returns a folder holding the shipped model: the per-user
// cache folder os.UserCacheDir()/pfedmma/models/<hash> (the system
// temporary folder when there is no user cache), written on first use and
// reused while its files are intact. Pass it, or its model.safetensors, to
// checkpoint.Load and tokenizer.FindVocab.
func DefaultModelDir() (string, error) {
	root, err := os.UserCacheDir()
	if err != nil || root == "" {
		root = os.TempDir()
	}
	return Materialize(filepath.Join(root, "pfedmma", "models"))
}

// Materialize writes the shipped model folder to root/<hash>, where hash
// names the embedded content, and returns that folder. Files already there
// whose SHA-256 matches are kept; missing or damaged ones are rewritten
// atomically (a temporary file renamed into place), so concurrent callers
// and interrupted writes never leave a partial file.
func Materialize(root string) (string, error) {
	files, h, err := digest()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, h)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("assets: model cache: %w", err)
	}
	for _, f := range files {
		dst := filepath.Join(dir, f.name)
		if intact(dst, f.sum) {
			continue
		}
		data, err := modelFiles.ReadFile(path.Join(modelRoot, f.name))
		if err != nil {
			return "", fmt.Errorf("assets: embedded model %s: %w", f.name, err)
		}
		if err := writeAtomic(dst, data); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// intact reports whether the file at p exists with the SHA-256 sum.
func intact(p string, sum [sha256.Size]byte) bool {
	data, err := os.ReadFile(p)
	if err != nil {
		return false
	}
	got := sha256.Sum256(data)
	return bytes.Equal(got[:], sum[:])
}

// writeAtomic writes data to a temporary file beside p, syncs it and renames
// it over p.
func writeAtomic(p string, data []byte) error {
	if err := atomicfile.WriteBytes(p, data); err != nil {
		return fmt.Errorf("assets: model cache %s: %w", p, err)
	}
	return nil
}

// LoadDefault materialises the shipped model (DefaultModelDir) and loads it
// with the ordinary loaders: the weights with checkpoint.Load and the
// vocabulary found beside them with tokenizer.FindVocab and tokenizer.Load.
func LoadDefault() (*clip.Weights, *tokenizer.Tokenizer, error) {
	dir, err := DefaultModelDir()
	if err != nil {
		return nil, nil, err
	}
	w, _, err := checkpoint.Load(filepath.Join(dir, ModelFile))
	if err != nil {
		return nil, nil, fmt.Errorf("assets: %w", err)
	}
	vp, err := tokenizer.FindVocab(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("assets: %w", err)
	}
	tok, err := tokenizer.Load(vp)
	if err != nil {
		return nil, nil, fmt.Errorf("assets: %w", err)
	}
	if tok.VocabSize() != w.Config.Text.VocabSize {
		return nil, nil, fmt.Errorf("assets: %s: vocabulary of %d ids for a model of %d", vp, tok.VocabSize(), w.Config.Text.VocabSize)
	}
	return w, tok, nil
}
