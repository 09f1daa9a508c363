package main

import (
	"fmt"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/experiment"
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
