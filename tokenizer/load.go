package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/pfedmma/pfedmma/internal/inputfile"
)

// File names of the vocabularies Load and FindVocab recognise.
const (
	// SimpleVocabGz is OpenAI CLIP's vocabulary file.
	SimpleVocabGz = "bpe_simple_vocab_16e6.txt.gz"
	// SimpleVocabTxt is the same file uncompressed.
	SimpleVocabTxt = "bpe_simple_vocab_16e6.txt"
	// HFVocab is the Hugging Face token → id map.
	HFVocab = "vocab.json"
	// HFMerges is the Hugging Face merge list.
	HFMerges = "merges.txt"
)

// Load reads a CLIP vocabulary. path is an OpenAI merges file
// (bpe_simple_vocab_16e6.txt.gz, gzip-compressed or not), a Hugging Face
// vocab.json or merges.txt (the pair in that folder is read), or a folder
// holding either (the OpenAI file first).
func Load(path string) (*Tokenizer, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: vocabulary %s: %w", path, err)
	}
	if info.IsDir() {
		found, err := FindVocab(path)
		if err != nil {
			return nil, err
		}
		path = found
	}
	switch filepath.Base(path) {
	case HFVocab, HFMerges:
		dir := filepath.Dir(path)
		return loadHF(filepath.Join(dir, HFVocab), filepath.Join(dir, HFMerges))
	}
	return loadSimple(path)
}

// FindVocab locates the vocabulary shipped with a model: modelPath is the
// model's folder or a file in it, and the folder is searched for
// bpe_simple_vocab_16e6.txt.gz, bpe_simple_vocab_16e6.txt, then vocab.json
// with merges.txt. It returns a path for Load (for the Hugging Face pair, the
// vocab.json); the error lists every path it tried.
func FindVocab(modelPath string) (string, error) {
	dir := modelPath
	info, err := os.Stat(modelPath)
	if err != nil {
		return "", fmt.Errorf("tokenizer: model %s: %w", modelPath, err)
	}
	if !info.IsDir() {
		dir = filepath.Dir(modelPath)
	}
	tried := []string{filepath.Join(dir, SimpleVocabGz), filepath.Join(dir, SimpleVocabTxt)}
	for _, p := range tried {
		if isFile(p) {
			return p, nil
		}
	}
	vocab, merges := filepath.Join(dir, HFVocab), filepath.Join(dir, HFMerges)
	if isFile(vocab) && isFile(merges) {
		return vocab, nil
	}
	tried = append(tried, vocab+" + "+merges)
	return "", fmt.Errorf("tokenizer: no CLIP vocabulary for %s: looked for %s", modelPath, strings.Join(tried, ", "))
}

func isFile(p string) bool {
	info, err := os.Stat(p)
	return err == nil && info.Mode().IsRegular()
}

// readMaybeGzip reads a file, decompressing it when its name ends in .gz or
// it starts with the gzip magic bytes.
func readMaybeGzip(path string) ([]byte, error) {
	data, err := inputfile.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: vocabulary %s: %w", path, err)
	}
	if !strings.HasSuffix(path, ".gz") && !bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
		return data, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: vocabulary %s: gzip: %w", path, err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: vocabulary %s: gzip: %w", path, err)
	}
	return out, nil
}

// loadSimple reads OpenAI's format: a header line, then one merge per line
// ("i n"); like simple_tokenizer.py it uses lines 2..48895 and builds the
// vocabulary from the merges.
func loadSimple(path string) (*Tokenizer, error) {
	data, err := readMaybeGzip(path)
	if err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("tokenizer: vocabulary %s: empty file", path)
	}
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("tokenizer: vocabulary %s: not UTF-8 text", path)
	}
	lines := strings.Split(string(data), "\n")[1:]
	if len(lines) > maxMerges {
		lines = lines[:maxMerges]
	}
	merges, err := parseMerges(path, lines, 2)
	if err != nil {
		return nil, err
	}
	if len(merges) == 0 {
		return nil, fmt.Errorf("tokenizer: vocabulary %s: no merge after the first (version) line: not a BPE vocabulary", path)
	}
	return FromMerges(merges), nil
}

// parseMerges parses "a b" lines; firstLine is the 1-based number of
// lines[0]. A final empty line (a trailing newline) is allowed.
func parseMerges(path string, lines []string, firstLine int) ([][2]string, error) {
	if n := len(lines); n > 0 && strings.TrimSpace(lines[n-1]) == "" {
		lines = lines[:n-1]
	}
	merges := make([][2]string, 0, len(lines))
	for i, line := range lines {
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("tokenizer: vocabulary %s: line %d: merge %q: want two symbols separated by a space", path, firstLine+i, line)
		}
		merges = append(merges, [2]string{f[0], f[1]})
	}
	return merges, nil
}

// loadHF reads the Hugging Face CLIPTokenizer files: vocab.json (token → id)
// and merges.txt (an optional "#version" line, then one merge per line, of
// which at most 48894 are used, as CLIPTokenizer does).
func loadHF(vocabPath, mergesPath string) (*Tokenizer, error) {
	vdata, err := inputfile.ReadFile(vocabPath)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: vocabulary %s: %w", vocabPath, err)
	}
	var encoder map[string]int
	if err := json.Unmarshal(vdata, &encoder); err != nil {
		return nil, fmt.Errorf("tokenizer: vocabulary %s: %w", vocabPath, err)
	}
	if len(encoder) == 0 {
		return nil, fmt.Errorf("tokenizer: vocabulary %s: no tokens", vocabPath)
	}
	maxID := -1
	for tok, id := range encoder {
		if id < 0 || id > 1<<24 {
			return nil, fmt.Errorf("tokenizer: vocabulary %s: token %q: id %d out of range", vocabPath, tok, id)
		}
		maxID = max(maxID, id)
	}
	decoder := make([]string, maxID+1)
	seen := make([]bool, maxID+1)
	for tok, id := range encoder {
		if seen[id] {
			return nil, fmt.Errorf("tokenizer: vocabulary %s: id %d is given to two tokens (%q, %q)", vocabPath, id, tok, decoder[id])
		}
		seen[id] = true
		decoder[id] = tok
	}

	mdata, err := inputfile.ReadFile(mergesPath)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: vocabulary %s: %w", mergesPath, err)
	}
	if !utf8.Valid(mdata) {
		return nil, fmt.Errorf("tokenizer: vocabulary %s: not UTF-8 text", mergesPath)
	}
	lines := strings.Split(string(mdata), "\n")
	first := 1
	if len(lines) > 0 && strings.HasPrefix(lines[0], "#version") {
		lines, first = lines[1:], 2
	}
	merges, err := parseMerges(mergesPath, lines, first)
	if err != nil {
		return nil, err
	}
	if len(merges) > maxMerges {
		merges = merges[:maxMerges]
	}

	for _, tok := range []string{sotText, eotText} {
		if _, ok := encoder[tok]; !ok {
			return nil, fmt.Errorf("tokenizer: vocabulary %s: no token %q", vocabPath, tok)
		}
	}
	for _, b := range byteSymbols() {
		for _, tok := range []string{b, b + endOfWord} {
			if _, ok := encoder[tok]; !ok {
				return nil, fmt.Errorf("tokenizer: vocabulary %s: no byte token %q", vocabPath, tok)
			}
		}
	}
	for i, m := range merges {
		if _, ok := encoder[m[0]+m[1]]; !ok {
			return nil, fmt.Errorf("tokenizer: vocabulary %s: merge %d (%q %q) makes %q, which %s lacks", mergesPath, i+1, m[0], m[1], m[0]+m[1], vocabPath)
		}
	}
	return newTokenizer(encoder, decoder, merges), nil
}
