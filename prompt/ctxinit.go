package prompt

import (
	"fmt"
	"math/rand/v2"
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

// FillContext sets ctx [nCtx, D] to init (the ctx_init words' context)
// when init is not nil, else to N(0, std²) draws of PCG(seed, salt) in
// order.
func FillContext(ctx, init []float32, nCtx, D int, seed, salt uint64, std float64) error {
	if init != nil {
		if len(init) != len(ctx) {
			return fmt.Errorf("ctx_init gives %d values, want %d × %d", len(init), nCtx, D)
		}
		copy(ctx, init)
		return nil
	}
	DrawContext(ctx, seed, salt, std)
	return nil
}

// DrawContext fills ctx with N(0, std²) draws of PCG(seed, salt) in order
// (each method its own salt).
func DrawContext(ctx []float32, seed, salt uint64, std float64) {
	rng := rand.New(rand.NewPCG(seed, salt))
	for i := range ctx {
		ctx[i] = float32(rng.NormFloat64() * std)
	}
}

// NewMultiEncoder returns the encoder of N contexts per class prompt
// (tokens [C, Ctx], nCtx context tokens at pos): its rows are prompt-major,
// row n·C + c context n with class c (FedOTP's and PLOT's N prompts).
func NewMultiEncoder(m *clip.Model, tokens []int, N, nCtx int, pos string) (*Encoder, error) {
	rows := make([]int, 0, N*len(tokens))
	for n := 0; n < N; n++ {
		rows = append(rows, tokens...)
	}
	return NewEncoderAt(m, rows, nCtx, pos)
}

// NewTeacher returns the encoder of the class prompts tokens [R, Ctx]
// (context placeholders at positions 1..nCtx) and a copy of the raw text
// features [R, E] of the hand-crafted prompts template [R, Ctx], encoded
// once by the frozen model (KgCoOp's target, ProGrad's teacher).
func NewTeacher(m *clip.Model, tokens, template []int, nCtx int) (*Encoder, []float32, error) {
	enc, err := NewEncoder(m, tokens, nCtx)
	if err != nil {
		return nil, nil, err
	}
	if len(template) != len(tokens) {
		return nil, nil, fmt.Errorf("%d hand-crafted prompt ids for %d class prompt ids", len(template), len(tokens))
	}
	feat, err := m.EncodeText(template, enc.R)
	if err != nil {
		return nil, nil, fmt.Errorf("hand-crafted prompts: %w", err)
	}
	return enc, append([]float32(nil), feat...), nil
}
