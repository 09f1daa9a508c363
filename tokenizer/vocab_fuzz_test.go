package tokenizer

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fuzzProbe is encoded by every vocabulary a fuzz target accepts.
const fuzzProbe = "a photo of a dog, the lower cat! ΑΣ 3.14"

// checkTokenizer: ids within the vocabulary, CLIP's id layout sizes, and a
// write/read round trip through writeBack gives the same merges and ids.
func checkTokenizer(t *testing.T, tok *Tokenizer, writeBack func(*Tokenizer) (*Tokenizer, bool)) {
	ids := tok.Encode(fuzzProbe)
	for _, id := range ids {
		if id < 0 || id >= tok.VocabSize() {
			t.Fatalf("id %d outside a vocabulary of %d", id, tok.VocabSize())
		}
	}
	if tok.SOT() < 0 || tok.SOT() >= tok.VocabSize() || tok.EOT() < 0 || tok.EOT() >= tok.VocabSize() || tok.SOT() == tok.EOT() {
		t.Fatalf("SOT %d EOT %d in a vocabulary of %d", tok.SOT(), tok.EOT(), tok.VocabSize())
	}
	back, ok := writeBack(tok)
	if !ok {
		return
	}
	if !slices.Equal(back.Merges(), tok.Merges()) || back.VocabSize() != tok.VocabSize() {
		t.Fatalf("round trip: %d merges / %d tokens, had %d / %d", len(back.Merges()), back.VocabSize(), len(tok.Merges()), tok.VocabSize())
	}
	if got := back.Encode(fuzzProbe); !slices.Equal(got, ids) {
		t.Fatalf("round trip: Encode gives %v, had %v", got, ids)
	}
}

// fastTempDir is a temporary folder on tmpfs where there is one: the
// writers fsync, which on disk would cap the fuzzers at a few runs a second.
func fastTempDir(f *testing.F) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", "pfedmma-fuzz-"); err == nil {
			f.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return f.TempDir()
}

func seedTokenizer(f *testing.F) (*Tokenizer, string) {
	tok := FromMerges(Learn(learnCorpus, 150))
	dir := f.TempDir()
	if err := tok.WriteHF(dir); err != nil {
		f.Fatal(err)
	}
	if err := tok.WriteBPEGz(filepath.Join(dir, SimpleVocabGz)); err != nil {
		f.Fatal(err)
	}
	return tok, dir
}

// FuzzLoadSimpleVocab reads OpenAI's bpe_simple_vocab_16e6.txt, plain or
// gzip-compressed.
func FuzzLoadSimpleVocab(f *testing.F) {
	_, seeds := seedTokenizer(f)
	gz, err := os.ReadFile(filepath.Join(seeds, SimpleVocabGz))
	if err != nil {
		f.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		f.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(plain, true)
	f.Add(plain, false)
	f.Add([]byte("#version: 0.2\ni n\nt h\nth e</w>\n"), false)
	f.Add([]byte("header\na\n"), false)
	f.Add([]byte("header\n\xff \xfe\n"), true)
	dir := fastTempDir(f)
	f.Fuzz(func(t *testing.T, text []byte, compress bool) {
		name, data := SimpleVocabTxt, text
		if compress {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			zw.Write(text)
			zw.Close()
			name, data = SimpleVocabGz, buf.Bytes()
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		tok, err := Load(p)
		if err != nil {
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if want := 2*256 + len(tok.Merges()) + 2; tok.VocabSize() != want {
			t.Fatalf("%d merges give %d tokens, want %d", len(tok.Merges()), tok.VocabSize(), want)
		}
		checkTokenizer(t, tok, func(tok *Tokenizer) (*Tokenizer, bool) {
			out := filepath.Join(dir, "out.txt.gz")
			if err := tok.WriteBPEGz(out); err != nil {
				return nil, false // not expressible in the format (reported as an error)
			}
			back, err := Load(out)
			if err != nil {
				t.Fatalf("written vocabulary does not load: %v", err)
			}
			return back, true
		})
	})
}

// FuzzLoadHFVocab reads a Hugging Face vocab.json + merges.txt pair.
func FuzzLoadHFVocab(f *testing.F) {
	_, seeds := seedTokenizer(f)
	vocab, err := os.ReadFile(filepath.Join(seeds, HFVocab))
	if err != nil {
		f.Fatal(err)
	}
	merges, err := os.ReadFile(filepath.Join(seeds, HFMerges))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(vocab, merges)
	f.Add(vocab, []byte("#version: 0.2\n"))
	f.Add(bytes.Replace(vocab, []byte(`"!":0,`), nil, 1), merges)
	f.Add([]byte(`{"a": -1}`), []byte(""))
	f.Add([]byte(`{"a": 0, "b": 0}`), []byte("a b\n"))
	dir := fastTempDir(f)
	out := fastTempDir(f)
	f.Fuzz(func(t *testing.T, vocab, merges []byte) {
		vp, mp := filepath.Join(dir, HFVocab), filepath.Join(dir, HFMerges)
		os.WriteFile(vp, vocab, 0o644)
		os.WriteFile(mp, merges, 0o644)
		tok, err := Load(vp)
		if err != nil {
			if !strings.Contains(err.Error(), dir) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		checkTokenizer(t, tok, func(tok *Tokenizer) (*Tokenizer, bool) {
			if err := tok.WriteHF(out); err != nil {
				return nil, false
			}
			back, err := Load(filepath.Join(out, HFVocab))
			if err != nil {
				t.Fatalf("written vocabulary does not load: %v", err)
			}
			return back, true
		})
	})
}
