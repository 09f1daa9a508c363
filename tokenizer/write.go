package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/internal/atomicfile"
)

// simpleHeader is the first line of OpenAI's vocabulary file (skipped by
// readers).
const simpleHeader = `"bpe_simple_vocab_16e6.txt#version: 0.2`

// WriteHF writes the vocabulary in the Hugging Face CLIPTokenizer format:
// dir/vocab.json (token → id, in id order) and dir/merges.txt
// ("#version: 0.2", then one merge per line). dir is created if needed.
func (t *Tokenizer) WriteHF(dir string) error {
	if err := t.checkWritable(); err != nil {
		return fmt.Errorf("tokenizer: write %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("tokenizer: write %s: %w", dir, err)
	}
	var v bytes.Buffer
	enc := json.NewEncoder(&v)
	enc.SetEscapeHTML(false)
	v.WriteByte('{')
	first := true
	for id, tok := range t.decoder {
		if cur, ok := t.encoder[tok]; !ok || cur != id {
			continue // a gap, or a duplicate string whose later id wins
		}
		if !first {
			v.WriteByte(',')
		}
		first = false
		if err := enc.Encode(tok); err != nil {
			return fmt.Errorf("tokenizer: write %s: token %d: %w", dir, id, err)
		}
		v.Truncate(v.Len() - 1) // Encode's newline
		v.WriteByte(':')
		v.WriteString(strconv.Itoa(id))
	}
	v.WriteString("}\n")

	var m bytes.Buffer
	m.WriteString("#version: 0.2\n")
	for _, p := range t.merges {
		m.WriteString(p[0] + " " + p[1] + "\n")
	}
	if err := writeFileAtomic(filepath.Join(dir, HFVocab), v.Bytes()); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, HFMerges), m.Bytes())
}

// WriteBPEGz writes the vocabulary as OpenAI's bpe_simple_vocab_16e6.txt.gz:
// gzip of a header line and one merge per line (no final newline, so that
// simple_tokenizer.py reads exactly these merges). The format cannot store
// ids, so it is an error unless the ids follow CLIP's layout (as for any
// tokenizer from FromMerges or an OpenAI file).
func (t *Tokenizer) WriteBPEGz(path string) error {
	if err := t.checkWritable(); err != nil {
		return fmt.Errorf("tokenizer: write %s: %w", path, err)
	}
	if !slices.Equal(t.decoder, clipVocab(t.merges)) {
		return fmt.Errorf("tokenizer: write %s: ids do not follow CLIP's layout (bytes, bytes+</w>, merges, specials); write the Hugging Face format instead", path)
	}
	var raw bytes.Buffer
	raw.WriteString(simpleHeader)
	for _, p := range t.merges {
		raw.WriteString("\n" + p[0] + " " + p[1])
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return fmt.Errorf("tokenizer: write %s: gzip: %w", path, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("tokenizer: write %s: gzip: %w", path, err)
	}
	return writeFileAtomic(path, z.Bytes())
}

// checkWritable rejects vocabularies the readers would not read back as is.
func (t *Tokenizer) checkWritable() error {
	if len(t.merges) > maxMerges {
		return fmt.Errorf("%d merges, but CLIP's readers use only the first %d", len(t.merges), maxMerges)
	}
	for i, m := range t.merges {
		for _, s := range m {
			if s == "" || strings.IndexFunc(s, isPySpace) >= 0 {
				return fmt.Errorf("merge %d (%q %q): a symbol is empty or holds whitespace", i+1, m[0], m[1])
			}
		}
	}
	return nil
}

// writeFileAtomic writes data to a temporary file next to path and renames
// it into place.
func writeFileAtomic(path string, data []byte) error {
	if err := atomicfile.WriteBytes(path, data); err != nil {
		return fmt.Errorf("tokenizer: write %s: %w", path, err)
	}
	return nil
}
