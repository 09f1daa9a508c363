package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// vocabPath is OpenAI's vocabulary, shared with the project but kept out of
// the repository (third-party data).
const vocabPath = "../../shared/clip-vocab/bpe_simple_vocab_16e6.txt.gz"

const casesPath = "../testdata/tokenizer/cases.json"

var (
	realOnce sync.Once
	realTok  *Tokenizer
	realErr  error
)

// realVocab returns the CLIP tokenizer. The vocabulary is third-party data
// kept out of the repository, beside it in ../shared (see README, "The CLIP
// vocabulary"). Without it the test skips, naming the file — except under
// CI=true, where ../shared is present and the test must run.
func realVocab(t testing.TB) *Tokenizer {
	t.Helper()
	realOnce.Do(func() {
		abs, _ := filepath.Abs(vocabPath)
		if _, err := os.Stat(vocabPath); err != nil {
			realErr = fmt.Errorf("CLIP vocabulary not found at %s (%s): %w; put OpenAI's bpe_simple_vocab_16e6.txt.gz there", vocabPath, abs, err)
			return
		}
		realTok, realErr = Load(vocabPath)
	})
	if realErr != nil && errors.Is(realErr, fs.ErrNotExist) && os.Getenv("CI") != "true" {
		t.Skipf("skipping: %v (CI=true makes this a failure)", realErr)
	}
	if realErr != nil {
		t.Fatal(realErr)
	}
	return realTok
}

type fixture struct {
	ContextLength int `json:"context_length"`
	SOT           int `json:"sot"`
	EOT           int `json:"eot"`
	Cases         []struct {
		Text            string `json:"text"`
		Tokens          []int  `json:"tokens"`
		Error           string `json:"error"`
		TruncatedTokens []int  `json:"truncated_tokens"`
	} `json:"cases"`
}

func loadFixture(t testing.TB) fixture {
	t.Helper()
	data, err := os.ReadFile(casesPath)
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	var f fixture
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("fixture %s: %v", casesPath, err)
	}
	if len(f.Cases) == 0 {
		t.Fatalf("fixture %s: no cases", casesPath)
	}
	return f
}

// checkCases asserts every fixture case on tok.
func checkCases(t *testing.T, tok *Tokenizer) {
	t.Helper()
	f := loadFixture(t)
	if tok.SOT() != f.SOT || tok.EOT() != f.EOT || tok.VocabSize() != 49408 {
		t.Fatalf("SOT, EOT, VocabSize = %d, %d, %d; want %d, %d, 49408", tok.SOT(), tok.EOT(), tok.VocabSize(), f.SOT, f.EOT)
	}
	for _, c := range f.Cases {
		got, err := tok.Tokenize(c.Text, f.ContextLength, false)
		if c.Error != "" {
			if err == nil || !errors.Is(err, ErrTooLong) || !strings.Contains(err.Error(), c.Error) {
				t.Errorf("Tokenize(%.40q): error %v, want one wrapping ErrTooLong and saying %q", c.Text, err, c.Error)
			} else if !strings.Contains(err.Error(), c.Text[:40]) {
				t.Errorf("Tokenize(%.40q): error %q does not name the text", c.Text, err)
			}
			trunc, err := tok.Tokenize(c.Text, f.ContextLength, true)
			if err != nil || !slices.Equal(trunc, c.TruncatedTokens) {
				t.Errorf("Tokenize(%.40q, truncate) = %v, %v; want %v", c.Text, trunc, err, c.TruncatedTokens)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.Tokens) {
			t.Errorf("Tokenize(%q) = %v, %v; want %v", c.Text, got, err, c.Tokens)
		}
	}
}

func TestTokenizeFixture(t *testing.T) {
	checkCases(t, realVocab(t))
}

func TestHFFormatRoundTrip(t *testing.T) {
	tok := realVocab(t)
	dir := t.TempDir()
	if err := tok.WriteHF(dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, HFVocab), filepath.Join(dir, HFMerges)} {
		t.Run(filepath.Base(p), func(t *testing.T) {
			hf, err := Load(p)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(hf.Merges(), tok.Merges()) {
				t.Fatalf("merges differ after the Hugging Face round trip")
			}
			checkCases(t, hf)
		})
	}
	merges, err := os.ReadFile(filepath.Join(dir, HFMerges))
	if err != nil || !strings.HasPrefix(string(merges), "#version: 0.2\ni n\n") {
		t.Errorf("merges.txt starts %.20q, %v; want the #version line, then the first merge", merges, err)
	}
}

func TestWriteBPEGzRoundTrip(t *testing.T) {
	tok := realVocab(t)
	path := filepath.Join(t.TempDir(), SimpleVocabGz)
	if err := tok.WriteBPEGz(path); err != nil {
		t.Fatal(err)
	}
	back, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Merges(), tok.Merges()) || len(back.Merges()) != maxMerges {
		t.Fatalf("%d merges after the round trip, want the same %d", len(back.Merges()), maxMerges)
	}
	checkCases(t, back)
}

func TestDecode(t *testing.T) {
	tok := realVocab(t)
	tests := []struct {
		ids  []int
		want string
	}{
		{tok.Encode("a photo of a cat."), "a photo of a cat . "},
		{tok.Encode("日本語 😀"), "日本語 😀 "},
		{[]int{tok.encoder[string(byteEncoder[0xA6])]}, "\ufffd"}, // a lone continuation byte
		{[]int{tok.SOT(), -1, 1 << 30, tok.EOT()}, "<|startoftext|><|endoftext|>"},
	}
	for _, tt := range tests {
		if got := tok.Decode(tt.ids); got != tt.want {
			t.Errorf("Decode(%v) = %q, want %q", tt.ids, got, tt.want)
		}
	}
}

func TestTokenizeEdges(t *testing.T) {
	tok := FromMerges(Learn([]string{"a photo of a cat", "a photo of a dog"}, 20))
	if _, err := tok.Tokenize("x", 0, true); err == nil {
		t.Error("context length 0: no error")
	}
	got, err := tok.Tokenize("a photo", 1, true)
	if err != nil || !slices.Equal(got, []int{tok.EOT()}) {
		t.Errorf("context 1, truncate: %v, %v; want [EOT]", got, err)
	}
	got, err = tok.Tokenize("", 4, false)
	if err != nil || !slices.Equal(got, []int{tok.SOT(), tok.EOT(), 0, 0}) {
		t.Errorf("empty text: %v, %v; want [SOT EOT 0 0]", got, err)
	}
	batch, err := tok.TokenizeBatch([]string{"a cat", "a dog"}, 8, false)
	if err != nil || len(batch) != 2 {
		t.Fatalf("TokenizeBatch: %v, %v", batch, err)
	}
	for i, text := range []string{"a cat", "a dog"} {
		one, _ := tok.Tokenize(text, 8, false)
		if !slices.Equal(batch[i], one) {
			t.Errorf("batch[%d] = %v, Tokenize = %v", i, batch[i], one)
		}
	}
	_, err = tok.TokenizeBatch([]string{"a", strings.Repeat("cat ", 20)}, 8, false)
	if !errors.Is(err, ErrTooLong) || !strings.Contains(err.Error(), "text 1") {
		t.Errorf("TokenizeBatch too long: %v, want ErrTooLong naming text 1", err)
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := FromMerges(Learn([]string{"the quick brown fox jumps over the lazy dog"}, 30))
	texts := []string{"the fox", "lazy dogs jump", "quick quick brown", "over the dog"}
	want := make([][]int, len(texts))
	for i, s := range texts {
		want[i] = FromMerges(tok.Merges()).Encode(s)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := 0; g < 8; g++ {
		wg.Go(func() {
			for k := 0; k < 50; k++ {
				i := (g + k) % len(texts)
				if got := tok.Encode(texts[i]); !slices.Equal(got, want[i]) {
					errs <- fmt.Sprintf("Encode(%q) = %v, want %v", texts[i], got, want[i])
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestLearn(t *testing.T) {
	tests := []struct {
		name   string
		corpus []string
		n      int
		want   [][2]string
	}{
		{"frequency first", []string{"ab ab ab cd"}, 10, [][2]string{{"a", "b</w>"}, {"c", "d</w>"}}},
		{"ties by symbol order", []string{"cd ab"}, 10, [][2]string{{"a", "b</w>"}, {"c", "d</w>"}}},
		{"limit", []string{"ab ab ab cd"}, 1, [][2]string{{"a", "b</w>"}}},
		{"builds on merges", []string{"abc abc abc"}, 10, [][2]string{{"a", "b"}, {"ab", "c</w>"}}},
		{"cleaned and lowercased", []string{"AB &amp; ab"}, 10, [][2]string{{"a", "b</w>"}}},
		{"special tokens skipped", []string{"<|startoftext|>xy<|endoftext|>"}, 10, [][2]string{{"x", "y</w>"}}},
		{"bytes", []string{"é"}, 10, [][2]string{{"Ã", "©</w>"}}},
		{"nothing to merge", []string{"a b c"}, 10, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Learn(tt.corpus, tt.n)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Learn(%q, %d) = %q, want %q", tt.corpus, tt.n, got, tt.want)
			}
		})
	}
}

// learnCorpus is a small corpus in the style of CLIP prompts.
var learnCorpus = []string{
	"a photo of a cat.", "a photo of a dog.", "a photo of a pickup truck.",
	"a photo of a maple tree.", "a photo of a sweet pepper.", "banded texture.",
	"a photo of apple pie, a type of food.", "a centered satellite photo of Annual Crop Land.",
	"a photo of a person doing Apply Eye Makeup.", "it's a photo of the 747 jumbo jet!",
}

func TestLearnRoundTrip(t *testing.T) {
	merges := Learn(learnCorpus, 150)
	if len(merges) == 0 || !slices.Equal(merges, Learn(learnCorpus, 150)) {
		t.Fatalf("Learn gave %d merges, or differs between runs", len(merges))
	}
	tok := FromMerges(merges)
	if tok.VocabSize() != 512+len(merges)+2 || tok.SOT() != 512+len(merges) || tok.EOT() != tok.SOT()+1 {
		t.Fatalf("VocabSize, SOT, EOT = %d, %d, %d for %d merges", tok.VocabSize(), tok.SOT(), tok.EOT(), len(merges))
	}
	photo := tok.Encode("photo")
	if len(photo) != 1 {
		t.Errorf("Encode(photo) = %v: a word this frequent should be one token", photo)
	}
	dir := t.TempDir()
	gz := filepath.Join(dir, "small.txt.gz")
	if err := tok.WriteBPEGz(gz); err != nil {
		t.Fatal(err)
	}
	if err := tok.WriteHF(dir); err != nil {
		t.Fatal(err)
	}
	fromGz, err := Load(gz)
	if err != nil {
		t.Fatal(err)
	}
	fromHF, err := Load(dir + "/" + HFVocab)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range append(learnCorpus, "an unseen zebra, 42 ÅÄÖ") {
		ids, err := tok.Tokenize(text, ContextLength, false)
		if err != nil {
			t.Fatal(err)
		}
		if ids[0] != tok.SOT() || len(ids) != ContextLength {
			t.Errorf("Tokenize(%q) = %v: want SOT first and %d ids", text, ids, ContextLength)
		}
		end := slices.Index(ids, tok.EOT())
		if end < 0 {
			t.Fatalf("Tokenize(%q) = %v: no EOT", text, ids)
		}
		dec := tok.Decode(ids[1:end])
		if squeeze(dec) != squeeze(cleanText(text)) {
			t.Errorf("Decode(Tokenize(%q)) = %q", text, dec)
		}
		for name, other := range map[string]*Tokenizer{"gz": fromGz, "hf": fromHF} {
			if got, _ := other.Tokenize(text, ContextLength, false); !slices.Equal(got, ids) {
				t.Errorf("%s reload: Tokenize(%q) = %v, want %v", name, text, got, ids)
			}
		}
	}
}

// squeeze drops what the pre-tokenizer skips (whitespace, U+0345): Decode
// separates every pre-token by a space.
func squeeze(s string) string {
	return strings.Map(func(r rune) rune {
		if splitSkip(r) {
			return -1
		}
		return r
	}, s)
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("header\ni n\nth e q\n"))
	zw.Close()
	tests := []struct {
		name string
		path string
		want []string // substrings of the error
	}{
		{"missing", filepath.Join(dir, "nope.txt.gz"), []string{"nope.txt.gz", "no such file"}},
		{"corrupt gzip", write("corrupt.txt.gz", []byte("this is not gzip")), []string{"corrupt.txt.gz", "gzip"}},
		{"truncated gzip", write("trunc.txt.gz", gz.Bytes()[:gz.Len()-6]), []string{"trunc.txt.gz", "gzip"}},
		{"malformed merge", write("bad.txt.gz", gz.Bytes()), []string{"bad.txt.gz", "line 3", `"th e q"`}},
		{"empty", write("empty.txt", nil), []string{"empty.txt", "empty"}},
		{"not utf-8", write("latin1.txt", []byte("h\ni \xe9\n")), []string{"latin1.txt", "UTF-8"}},
		{"empty folder", filepath.Join(dir, "emptydir") + string(os.PathSeparator), []string{SimpleVocabGz, SimpleVocabTxt, HFVocab, HFMerges}},
		{"bad vocab.json", write("hf1/vocab.json", []byte("{")), []string{"vocab.json"}},
		{"merge outside vocab", write("hf2/vocab.json", []byte(`{"a":0}`)), []string{"vocab.json", "no token"}},
	}
	os.MkdirAll(filepath.Join(dir, "emptydir"), 0o755)
	write("hf1/merges.txt", []byte("#version: 0.2\n"))
	write("hf2/merges.txt", []byte("#version: 0.2\na b\n"))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := Load(tt.path)
			if err == nil {
				t.Fatalf("Load(%s) = %v, want an error", tt.path, tok)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Load(%s) error %q does not mention %q", tt.path, err, w)
				}
			}
		})
	}
}

func TestLoadHFMergeNotInVocab(t *testing.T) {
	dir := t.TempDir()
	tok := FromMerges([][2]string{{"a", "b"}})
	if err := tok.WriteHF(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, HFMerges), []byte("#version: 0.2\na b\nc d\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(dir)
	if err == nil || !strings.Contains(err.Error(), HFMerges) || !strings.Contains(err.Error(), `"cd"`) {
		t.Errorf("Load: %v, want an error naming merges.txt and the missing token \"cd\"", err)
	}
}

func TestFindVocab(t *testing.T) {
	root := t.TempDir()
	mk := func(rel string) string {
		p := filepath.Join(root, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	gz := mk("openai/" + SimpleVocabGz)
	model := mk("openai/ViT-B-32.safetensors")
	mk("hf/" + HFMerges)
	hfVocab := mk("hf/" + HFVocab)
	mk("half/" + HFVocab)
	tests := []struct {
		model, want string
	}{
		{filepath.Dir(gz), gz},
		{model, gz},
		{filepath.Join(root, "hf"), hfVocab},
	}
	for _, tt := range tests {
		if got, err := FindVocab(tt.model); err != nil || got != tt.want {
			t.Errorf("FindVocab(%s) = %q, %v; want %q", tt.model, got, err, tt.want)
		}
	}
	_, err := FindVocab(filepath.Join(root, "half"))
	if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "half", HFMerges)) || !strings.Contains(err.Error(), SimpleVocabGz) {
		t.Errorf("FindVocab(half): %v, want an error listing what it looked for", err)
	}
	if _, err := FindVocab(filepath.Join(root, "absent")); err == nil {
		t.Error("FindVocab(absent): no error")
	}
}

func TestWriteRejects(t *testing.T) {
	dir := t.TempDir()
	if err := FromMerges([][2]string{{"a b", "c"}}).WriteHF(dir); err == nil {
		t.Error("WriteHF with a space in a symbol: no error")
	}
	hf := FromMerges([][2]string{{"a", "b"}})
	if err := hf.WriteHF(dir); err != nil {
		t.Fatal(err)
	}
	// Swap two ids: valid for Hugging Face, not expressible in OpenAI's format.
	vocab, _ := os.ReadFile(filepath.Join(dir, HFVocab))
	vocab = bytes.Replace(vocab, []byte(`"!":0,"\"":1`), []byte(`"!":1,"\"":0`), 1)
	os.WriteFile(filepath.Join(dir, HFVocab), vocab, 0o644)
	swapped, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := swapped.WriteBPEGz(filepath.Join(dir, "x.gz")); err == nil || !strings.Contains(err.Error(), "layout") {
		t.Errorf("WriteBPEGz with non-CLIP ids: %v, want a layout error", err)
	}
}

func FuzzTokenize(f *testing.F) {
	var tok *Tokenizer
	if _, err := os.Stat(vocabPath); err == nil {
		tok = realVocab(f)
	} else {
		tok = FromMerges(Learn(learnCorpus, 150))
	}
	for _, s := range learnCorpus {
		f.Add(s, false)
	}
	for _, s := range []string{"", "&amp;&#0;&#x110000;", "\xff\xe2\x82", "ΑΣ İ ſ \u0345", "<|endoftext|><|startoftext|>", strings.Repeat("word ", 100)} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, text string, truncate bool) {
		enc := tok.Encode(text)
		ids, err := tok.Tokenize(text, ContextLength, truncate)
		fits := len(enc)+2 <= ContextLength
		if err != nil {
			if fits || truncate || !errors.Is(err, ErrTooLong) {
				t.Fatalf("Tokenize(%q, %v) with %d tokens: %v", text, truncate, len(enc), err)
			}
			return
		}
		if !fits && !truncate {
			t.Fatalf("Tokenize(%q) with %d tokens: no error", text, len(enc))
		}
		if len(ids) != ContextLength || ids[0] != tok.SOT() {
			t.Fatalf("Tokenize(%q) = %v: want %d ids starting with SOT", text, ids, ContextLength)
		}
		want := append([]int{tok.SOT()}, enc...)
		if !fits {
			want = want[:ContextLength-1]
		}
		want = append(want, tok.EOT())
		want = append(want, make([]int, ContextLength-len(want))...)
		if !slices.Equal(ids, want) {
			t.Fatalf("Tokenize(%q) = %v, want %v (SOT, Encode, EOT, zeros)", text, ids, want)
		}
		for _, id := range enc {
			if id < 0 || id >= tok.VocabSize() {
				t.Fatalf("Encode(%q): id %d outside the vocabulary", text, id)
			}
		}
		// Decoding gives back the cleaned text, less what the split skips.
		dec := tok.Decode(enc)
		if !utf8.ValidString(dec) || squeeze(dec) != squeeze(cleanText(text)) {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q up to spaces", text, dec, cleanText(text))
		}
	})
}
