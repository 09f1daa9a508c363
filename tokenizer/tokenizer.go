// Package tokenizer is CLIP's byte-level BPE tokenizer, a faithful port of
// OpenAI's simple_tokenizer.py (clip.tokenize): the same vocabulary layout,
// text cleaning, pre-tokenizer and merge procedure, so that every text maps
// to the same ids as the reference. It also reads and writes the Hugging Face
// CLIPTokenizer files (vocab.json + merges.txt) and learns small BPE
// vocabularies in the same format.
//
// Deviation from the reference: ftfy.fix_text is not applied. For ordinary
// well-formed text it is the identity; it differs on mojibake, curly quotes
// (’ → '), ligatures (ﬁ → fi), full-width forms, terminal escapes, control
// characters and non-NFC text, which this package tokenizes as given.
// Unicode properties come from Go's unicode tables, so characters assigned in
// a newer Unicode version than Go's may be classified differently from
// Python's.
package tokenizer

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// ContextLength is CLIP's text context length (tokens per text, with SOT and
// EOT, zero padded).
const ContextLength = 77

// MaxContextLength bounds the context length Tokenize pads to: far above
// any CLIP's (77; long-context variants use a few hundred), low enough that
// a typo is refused rather than allocated.
const MaxContextLength = 1 << 16

// maxMerges is how many merges simple_tokenizer.py reads from its vocabulary
// file: merges[1:49152-256-2+1].
const maxMerges = 49152 - 256 - 2

// endOfWord marks the last symbol of a pre-token.
const endOfWord = "</w>"

// ErrTooLong is wrapped by the errors of Tokenize and TokenizeBatch for a text
// that does not fit the context length.
var ErrTooLong = errors.New("too long for context length")

// cacheLimit bounds the BPE cache; it is cleared when full.
const cacheLimit = 1 << 16

// Tokenizer maps text to CLIP token ids. It is safe for concurrent use.
type Tokenizer struct {
	encoder map[string]int // token → id (the last id wins for duplicates, as a Python dict)
	decoder []string       // id → token
	ranks   map[[2]string]int
	merges  [][2]string
	sot     int
	eot     int

	mu    sync.Mutex
	cache map[string][]int // byte-encoded pre-token → ids
}

// byteEncoder is simple_tokenizer.py's bytes_to_unicode(): printable bytes
// map to themselves, the others to U+0100 onwards, in byte order.
var byteEncoder, byteDecoder = func() ([256]rune, map[rune]byte) {
	var enc [256]rune
	dec := make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		if isPrintableByte(b) {
			enc[b] = rune(b)
		} else {
			enc[b] = rune(256 + n)
			n++
		}
		dec[enc[b]] = byte(b)
	}
	return enc, dec
}()

func isPrintableByte(b int) bool {
	return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
}

// byteSymbols returns the 256 byte symbols in vocabulary order: the printable
// bytes ascending, then the others (U+0100...) — the order of
// list(bytes_to_unicode().values()).
func byteSymbols() []string {
	out := make([]string, 0, 256)
	for b := 0; b < 256; b++ {
		if isPrintableByte(b) {
			out = append(out, string(byteEncoder[b]))
		}
	}
	for b := 0; b < 256; b++ {
		if !isPrintableByte(b) {
			out = append(out, string(byteEncoder[b]))
		}
	}
	return out
}

// clipVocab returns CLIP's vocabulary for the given merges: byte symbols,
// byte symbols + "</w>", the merged symbols, "<|startoftext|>", "<|endoftext|>".
func clipVocab(merges [][2]string) []string {
	bytes := byteSymbols()
	vocab := make([]string, 0, 2*len(bytes)+len(merges)+2)
	vocab = append(vocab, bytes...)
	for _, b := range bytes {
		vocab = append(vocab, b+endOfWord)
	}
	for _, m := range merges {
		vocab = append(vocab, m[0]+m[1])
	}
	return append(vocab, sotText, eotText)
}

// FromMerges builds a tokenizer from BPE merges, in rank order, with the
// vocabulary laid out as CLIP's: the 256 byte symbols, the same with "</w>",
// one symbol per merge, then <|startoftext|> and <|endoftext|>. Symbols are in
// the byte-to-unicode alphabet, as Learn returns them.
func FromMerges(merges [][2]string) *Tokenizer {
	vocab := clipVocab(merges)
	encoder := make(map[string]int, len(vocab))
	for i, tok := range vocab {
		encoder[tok] = i
	}
	return newTokenizer(encoder, vocab, merges)
}

// newTokenizer assembles a tokenizer; encoder must contain the special
// tokens and every symbol BPE can produce (checked by the loaders).
func newTokenizer(encoder map[string]int, decoder []string, merges [][2]string) *Tokenizer {
	ranks := make(map[[2]string]int, len(merges))
	for i, m := range merges {
		ranks[m] = i
	}
	return &Tokenizer{
		encoder: encoder,
		decoder: decoder,
		ranks:   ranks,
		merges:  merges,
		sot:     encoder[sotText],
		eot:     encoder[eotText],
		cache:   make(map[string][]int),
	}
}

// SOT returns the id of <|startoftext|> (49406 in CLIP).
func (t *Tokenizer) SOT() int { return t.sot }

// EOT returns the id of <|endoftext|> (49407 in CLIP).
func (t *Tokenizer) EOT() int { return t.eot }

// VocabSize returns the number of token ids (49408 in CLIP), the row count of
// the model's token embedding.
func (t *Tokenizer) VocabSize() int { return len(t.decoder) }

// Merges returns a copy of the BPE merges in rank order.
func (t *Tokenizer) Merges() [][2]string {
	return append([][2]string(nil), t.merges...)
}

// Encode returns the token ids of text without <|startoftext|> and
// <|endoftext|> (SimpleTokenizer.encode). "<|startoftext|>" and
// "<|endoftext|>" written in the text become the special ids.
func (t *Tokenizer) Encode(text string) []int {
	var ids []int
	for _, tok := range split(cleanText(text)) {
		ids = append(ids, t.bpe(tok)...)
	}
	return ids
}

// Tokenize returns <|startoftext|>, the ids of text and <|endoftext|>, zero
// padded to contextLength (clip.tokenize). A text with more tokens is an
// error wrapping ErrTooLong, unless truncate is set: then it is cut to
// contextLength ids and the last one is replaced by <|endoftext|>.
func (t *Tokenizer) Tokenize(text string, contextLength int, truncate bool) ([]int, error) {
	if contextLength < 1 || contextLength > MaxContextLength {
		return nil, fmt.Errorf("tokenizer: context length %d, want 1 to %d", contextLength, MaxContextLength)
	}
	ids := make([]int, 0, contextLength+2)
	ids = append(ids, t.sot)
	ids = append(ids, t.Encode(text)...)
	ids = append(ids, t.eot)
	if len(ids) > contextLength {
		if !truncate {
			return nil, fmt.Errorf("tokenizer: text %s (%d tokens) is %w %d", quotePrefix(text, 60), len(ids), ErrTooLong, contextLength)
		}
		ids = ids[:contextLength]
		ids[contextLength-1] = t.eot
	}
	out := make([]int, contextLength)
	copy(out, ids)
	return out, nil
}

// TokenizeBatch tokenizes each text as Tokenize does; the first text that is
// too long (without truncate) is an error naming it and its index.
func (t *Tokenizer) TokenizeBatch(texts []string, contextLength int, truncate bool) ([][]int, error) {
	out := make([][]int, len(texts))
	for i, text := range texts {
		ids, err := t.Tokenize(text, contextLength, truncate)
		if err != nil {
			return nil, fmt.Errorf("text %d: %w", i, err)
		}
		out[i] = ids
	}
	return out, nil
}

// quotePrefix quotes the first n characters of s, marking a cut with "…".
func quotePrefix(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return fmt.Sprintf("%q", s)
	}
	runes := []rune(s)
	return fmt.Sprintf("%q…", string(runes[:n]))
}

// Decode returns the text of ids (SimpleTokenizer.decode): the tokens'
// bytes, decoded as UTF-8 with invalid sequences replaced by U+FFFD, and
// every "</w>" replaced by a space. Ids outside the vocabulary are skipped;
// padding zeros are not special (id 0 is "!").
func (t *Tokenizer) Decode(ids []int) string {
	var raw []byte
	for _, id := range ids {
		if id < 0 || id >= len(t.decoder) {
			continue
		}
		for _, r := range t.decoder[id] {
			if b, ok := byteDecoder[r]; ok {
				raw = append(raw, b)
			} else {
				raw = utf8.AppendRune(raw, r)
			}
		}
	}
	return strings.ReplaceAll(toValidUTF8(string(raw)), endOfWord, " ")
}

// bpe returns the ids of one pre-token (SimpleTokenizer.bpe followed by the
// encoder lookup), caching the result.
func (t *Tokenizer) bpe(token string) []int {
	if token == sotText || token == eotText {
		return []int{t.encoder[token]}
	}
	var sb strings.Builder
	for i := 0; i < len(token); i++ {
		sb.WriteRune(byteEncoder[token[i]])
	}
	key := sb.String()
	t.mu.Lock()
	ids, ok := t.cache[key]
	t.mu.Unlock()
	if ok {
		return ids
	}
	ids = t.lookup(t.merge(key))
	t.mu.Lock()
	if len(t.cache) >= cacheLimit {
		clear(t.cache)
	}
	t.cache[key] = ids
	t.mu.Unlock()
	return ids
}

// merge splits a byte-encoded pre-token into symbols, the last one marked
// with "</w>", and applies merges lowest rank first until none applies.
func (t *Tokenizer) merge(key string) []string {
	word := make([]string, 0, utf8.RuneCountInString(key))
	for _, r := range key {
		word = append(word, string(r))
	}
	if len(word) == 0 {
		return nil
	}
	word[len(word)-1] += endOfWord
	for len(word) > 1 {
		best, bestRank := -1, 0
		for i := 0; i+1 < len(word); i++ {
			if r, ok := t.ranks[[2]string{word[i], word[i+1]}]; ok && (best < 0 || r < bestRank) {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			break
		}
		first, second := word[best], word[best+1]
		next := word[:0:0]
		for i := 0; i < len(word); {
			if i+1 < len(word) && word[i] == first && word[i+1] == second {
				next = append(next, first+second)
				i += 2
			} else {
				next = append(next, word[i])
				i++
			}
		}
		word = next
	}
	return word
}

// lookup maps symbols to ids. The loaders guarantee every symbol merge can
// produce is in the vocabulary; a symbol that is not (only possible for a
// hand-made vocabulary) falls back to its byte symbols.
func (t *Tokenizer) lookup(symbols []string) []int {
	ids := make([]int, 0, len(symbols))
	for _, s := range symbols {
		if id, ok := t.encoder[s]; ok {
			ids = append(ids, id)
			continue
		}
		base, eow := strings.CutSuffix(s, endOfWord)
		runes := []rune(base)
		for i, r := range runes {
			sym := string(r)
			if eow && i == len(runes)-1 {
				sym += endOfWord
			}
			if id, ok := t.encoder[sym]; ok {
				ids = append(ids, id)
			}
		}
	}
	return ids
}
