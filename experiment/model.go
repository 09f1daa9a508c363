package experiment

import (
	"fmt"
	"log/slog"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/internal/inputfile"
	"github.com/pfedmma/pfedmma/tokenizer"
)

// LoadWeights loads CLIP weights from a checkpoint file or folder (any
// supported scheme), refusing non-finite weights and MLP activations other
// than CLIP's.
func LoadWeights(path string) (*clip.Model, error) {
	if err := inputfile.CheckAny(path); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	w, info, err := checkpoint.Load(path)
	if err != nil {
		return nil, err
	}
	if err := checkpoint.CheckFinite(w); err != nil {
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	if info.Activation != "" && info.Activation != "quick_gelu" {
		return nil, fmt.Errorf("model %s: MLP activation %q is not supported (CLIP uses quick_gelu)", path, info.Activation)
	}
	slog.Debug("model loaded", "path", path, "scheme", info.Scheme, "params", info.Params)
	return clip.New(w), nil
}

// LoadModel loads CLIP weights (LoadWeights) and the tokenizer: vocab, or
// the vocabulary shipped with the model when empty.
func LoadModel(path, vocab string) (*clip.Model, *tokenizer.Tokenizer, error) {
	m, err := LoadWeights(path)
	if err != nil {
		return nil, nil, err
	}
	if vocab == "" {
		var err error
		if vocab, err = tokenizer.FindVocab(path); err != nil {
			return nil, nil, fmt.Errorf("no vocabulary given (--vocab, or the configuration's vocab): %w", err)
		}
	}
	if err := inputfile.Check(vocab); err != nil {
		return nil, nil, fmt.Errorf("vocabulary: %w", err)
	}
	tok, err := tokenizer.Load(vocab)
	if err != nil {
		return nil, nil, err
	}
	if tok.VocabSize() != m.W.Config.Text.VocabSize {
		return nil, nil, fmt.Errorf("vocabulary %s has %d tokens but model %s expects %d", vocab, tok.VocabSize(), path, m.W.Config.Text.VocabSize)
	}
	return m, tok, nil
}
