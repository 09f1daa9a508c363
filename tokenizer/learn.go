package tokenizer

import (
	"slices"
	"strings"
)

// Learn trains byte-level BPE merges on a corpus, for a small vocabulary in
// CLIP's format (see FromMerges). Each text is cleaned and pre-tokenized as
// Encode does; each pre-token becomes its byte symbols with "</w>" appended
// to the last. Then, up to numMerges times, the most frequent adjacent pair
// (counted over all words, weighted by word frequency) is merged everywhere;
// ties go to the lexicographically smallest pair (first symbol, then
// second), so the result is deterministic. Learning stops early when no pair
// is left. The special tokens are not learned from.
func Learn(corpus []string, numMerges int) [][2]string {
	keys, counts := wordCounts(corpus)

	type word struct {
		syms []string
		freq int
	}
	words := make([]word, len(keys))
	pairs := make(map[[2]string]int)
	where := make(map[[2]string]map[int]struct{}) // pair → words that held it (may be stale)
	addPairs := func(i, sign int) {
		w := words[i]
		for j := 0; j+1 < len(w.syms); j++ {
			p := [2]string{w.syms[j], w.syms[j+1]}
			pairs[p] += sign * w.freq
			if pairs[p] == 0 {
				delete(pairs, p)
			}
			if sign > 0 {
				if where[p] == nil {
					where[p] = make(map[int]struct{})
				}
				where[p][i] = struct{}{}
			}
		}
	}
	for i, k := range keys {
		syms := make([]string, 0, len(k))
		for j := 0; j < len(k); j++ {
			syms = append(syms, string(byteEncoder[k[j]]))
		}
		syms[len(syms)-1] += endOfWord
		words[i] = word{syms: syms, freq: counts[k]}
		addPairs(i, 1)
	}

	var merges [][2]string
	for len(merges) < numMerges && len(pairs) > 0 {
		var best [2]string
		bestCount := 0
		for p, c := range pairs {
			if c > bestCount || (c == bestCount && pairLess(p, best)) {
				best, bestCount = p, c
			}
		}
		merges = append(merges, best)
		joined := best[0] + best[1]
		for i := range where[best] {
			syms := words[i].syms
			if !holdsPair(syms, best) {
				continue
			}
			addPairs(i, -1)
			words[i].syms = mergePair(syms, best, joined)
			addPairs(i, 1)
		}
		delete(where, best)
	}
	return merges
}

// wordCounts counts the corpus's words (the pre-tokenizer's pieces,
// without the special tokens) and returns them sorted with their counts.
func wordCounts(corpus []string) ([]string, map[string]int) {
	counts := make(map[string]int)
	for _, text := range corpus {
		for _, tok := range split(cleanText(text)) {
			if tok != sotText && tok != eotText {
				counts[tok]++
			}
		}
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, counts
}

// mergePair replaces each occurrence of the pair best in syms, left to
// right, by joined.
func mergePair(syms []string, best [2]string, joined string) []string {
	next := make([]string, 0, len(syms))
	for j := 0; j < len(syms); {
		if j+1 < len(syms) && syms[j] == best[0] && syms[j+1] == best[1] {
			next = append(next, joined)
			j += 2
		} else {
			next = append(next, syms[j])
			j++
		}
	}
	return next
}

func pairLess(a, b [2]string) bool {
	if c := strings.Compare(a[0], b[0]); c != 0 {
		return c < 0
	}
	return a[1] < b[1]
}

func holdsPair(syms []string, p [2]string) bool {
	for j := 0; j+1 < len(syms); j++ {
		if syms[j] == p[0] && syms[j+1] == p[1] {
			return true
		}
	}
	return false
}
