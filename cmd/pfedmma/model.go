package main

import (
	"fmt"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/internal/memlimit"
	"github.com/pfedmma/pfedmma/tokenizer"
)

// defaultModelDir is set by the assets wiring when an embedded default
// model is compiled in; it returns the folder to load.
var defaultModelDir func() (string, error)

// resolveModelPath returns path, or the embedded default model when empty.
func resolveModelPath(path string) (string, error) {
	if path != "" {
		return path, nil
	}
	if defaultModelDir == nil {
		return "", fmt.Errorf("no --model given and no embedded default model in this build")
	}
	return defaultModelDir()
}

// loadModel resolves path (empty: the embedded model) and loads it with
// experiment.LoadModel, or only its weights (experiment.LoadWeights) when
// no tokenizer is needed.
func loadModel(path, vocab string, needVocab bool) (*clip.Model, *tokenizer.Tokenizer, error) {
	path, err := resolveModelPath(path)
	if err != nil {
		return nil, nil, err
	}
	if !needVocab {
		m, err := experiment.LoadWeights(path)
		return m, nil, err
	}
	return experiment.LoadModel(path, vocab)
}

// tokenizeAll tokenises texts to the model's context length as one flat
// [len(texts), ctx] slice.
func tokenizeAll(tok *tokenizer.Tokenizer, texts []string, ctx int) ([]int, error) {
	out := make([]int, 0, len(texts)*ctx)
	for _, s := range texts {
		ids, err := tok.Tokenize(s, ctx, false)
		if err != nil {
			return nil, err
		}
		out = append(out, ids...)
	}
	return out, nil
}

// checkImageMemory refuses holding n preprocessed images of side S when
// the estimate exceeds the memory the machine has available (after the
// model was loaded), naming what to lower (what: the command).
func checkImageMemory(what string, n, S int) error {
	need := memlimit.Mul(int64(n), 3, int64(S), int64(S), 4, 2)
	if err := memlimit.Check(fmt.Sprintf("%s of %d images of %d×%d pixels", what, n, S, S), need, memlimit.AvailableMiB(),
		"give fewer --image files per call"); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
