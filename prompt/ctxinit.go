package prompt

import (
	"fmt"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/tokenizer"
)

// InitContext returns CoOp's word initialisation of a context (ctx_init):
// the frozen token embeddings of the words' tokens, [n, D] with n their
// token count ("a photo of a": 4). An empty ctxInit gives nil, 0.
func InitContext(m *clip.Model, tok *tokenizer.Tokenizer, ctxInit string) ([]float32, int, error) {
	ctxInit = strings.TrimSpace(strings.ReplaceAll(ctxInit, "_", " "))
	if ctxInit == "" {
		return nil, 0, nil
	}
	if tok == nil {
		return nil, 0, fmt.Errorf("ctx_init %q: no tokenizer to read it with", ctxInit)
	}
	ids := tok.Encode(ctxInit)
	if len(ids) == 0 || len(ids) > 64 {
		return nil, 0, fmt.Errorf("ctx_init %q: %d tokens, want 1..64", ctxInit, len(ids))
	}
	D, V := m.W.Config.Text.Width, m.W.Config.Text.VocabSize
	out := make([]float32, len(ids)*D)
	for i, id := range ids {
		if id < 0 || id >= V {
			return nil, 0, fmt.Errorf("ctx_init %q: token id %d outside the model's vocabulary of %d", ctxInit, id, V)
		}
		copy(out[i*D:(i+1)*D], m.Text.W.TokenEmb[id*D:(id+1)*D])
	}
	return out, len(ids), nil
}
