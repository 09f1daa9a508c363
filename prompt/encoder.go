// Package prompt is the learnable-prompt (CoOp) engine: context vectors that
// replace the token embeddings at positions 1..n_ctx of tokenised prompts
// "X X … X {class}.", run through a frozen CLIP text encoder, with the exact
// gradient back to the context vectors (and only to them).
//
// The methods that learn prompts (PromptFL, FedPGP, …) build on Encoder for
// the text side and on CrossEntropy / CosinePair for their losses.
package prompt

import (
	"fmt"
	"slices"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/nn"
)

// Encoder runs R prompt rows through a frozen CLIP text encoder with learned
// context vectors at positions 1..NCtx of every row.
//
// It owns its own activations (a private copy of the text tower's block
// list that shares the frozen weights), so several Encoders — several
// prompts of one method, or several clients — can use the same *clip.Model
// and keep their forward passes alive for Backward independently. No weight
// gradients are computed: the blocks have no gradient buffers, so the
// backward pass runs only the input-gradient GEMMs.
//
// Every row is cut after the last EOT of all rows (T = max EOT + 1 ≤ Ctx):
// under the causal mask positions after a row's EOT never reach its EOT
// feature, so the result equals the full-length one while the blocks run on
// T instead of Ctx tokens.
//
// When several rows share a context (G < R) and their first token, the
// SOT+context positions are computed once per group and each row runs only
// its own suffix (see sharedPrefix): also exact, and about 4× fewer rows at
// CoOp's shapes (n_ctx 16, short class names).
//
// An Encoder is not safe for concurrent use.
type Encoder struct {
	text clip.Text // frozen copy: shared weights, own buffers

	R, NCtx, D, E int // rows, context length, width, feature dim
	T             int // sequence length actually run (last EOT + 1)

	eot    []int     // [R] EOT position of each row
	base   []float32 // [R, T, D] token embedding + positional embedding; context positions hold only the positional embedding
	tokCtx []float32 // [R, NCtx, D] the frozen token embeddings at the context positions

	first []int // [R] token at position 0 of each row

	// slots[r][j] is the position of context vector j in row r (nil: CoOp's
	// "end", positions 1..NCtx in every row); see NewEncoderAt.
	slots [][]int

	// Shared-prefix path (see sharedPrefix), used when G < R and the rows of
	// every group share their first token; noShare turns it off (tests).
	shared   *sharedPrefix
	noShare  bool
	usedPack bool
	xp       []float32 // [N, D] packed first block input

	groups int       // G of the last Forward
	x0     []float32 // [R, T, D] first block input
	feat   []float32 // [R, E] features of the last Forward
	dx0    []float32 // [R, T, D]
	dctx   []float32 // [G, NCtx, D]
}

// Class-token positions of CoOp's PromptLearner (its CLASS_TOKEN_POSITION).
const (
	PositionEnd    = "end"    // [SOS][ctx][name][. EOS]
	PositionMiddle = "middle" // [SOS][ctx[:n/2]][name][ctx[n/2:]][. EOS]
	PositionFront  = "front"  // [SOS][name][ctx][. EOS]
)

// CheckPosition names a class-token position that is not end, middle or
// front.
func CheckPosition(pos string) error {
	switch pos {
	case PositionEnd, PositionMiddle, PositionFront:
		return nil
	}
	return fmt.Errorf("class_token_position %q: want end, middle or front", pos)
}

// EndOnly refuses a class-token position other than "end" (or "") for a
// method whose authors' code has no other; why says so, naming the code.
func EndOnly(pos, why string) error {
	if pos == "" || pos == PositionEnd {
		return nil
	}
	return fmt.Errorf("class_token_position %q: %s", pos, why)
}

// NewEncoderAt is NewEncoder with CoOp's class-token position: tokens are
// still the rows "SOT X…X {name} . EOT" (nCtx placeholders), and the name's
// tokens (all between the placeholders and the final ".") move in front of
// the context ("front") or between its halves, n/2 vectors before
// ("middle"), as the authors' PromptLearner rearranges its embeddings. The
// EOT stays in place. Middle and front bypass the shared-prefix path (the
// rows of a group no longer share their first 1+nCtx tokens).
func NewEncoderAt(m *clip.Model, tokens []int, nCtx int, pos string) (*Encoder, error) {
	if err := CheckPosition(pos); err != nil {
		return nil, fmt.Errorf("prompt: %w", err)
	}
	if pos == PositionEnd {
		return NewEncoder(m, tokens, nCtx)
	}
	ctxLen := m.Text.Cfg.ContextLength
	if nCtx < 1 || len(tokens) == 0 || len(tokens)%ctxLen != 0 {
		return NewEncoder(m, tokens, nCtx) // its errors
	}
	R := len(tokens) / ctxLen
	eot := clip.EOTPositions(tokens, R, ctxLen)
	moved := slices.Clone(tokens)
	slots := make([][]int, R)
	for r := 0; r < R; r++ {
		L := eot[r] - 2 - nCtx // name tokens between the context and the "."
		if L < 0 {
			return nil, fmt.Errorf("prompt: token row %d: EOT at position %d leaves no room for %d context tokens and a final \".\"", r, eot[r], nCtx)
		}
		row, src := moved[r*ctxLen:(r+1)*ctxLen], tokens[r*ctxLen:(r+1)*ctxLen]
		ctxIDs, name := src[1:1+nCtx], src[1+nCtx:1+nCtx+L]
		h := 0 // context vectors before the name
		if pos == PositionMiddle {
			h = nCtx / 2
		}
		seq := slices.Concat(ctxIDs[:h], name, ctxIDs[h:])
		copy(row[1:], seq)
		s := make([]int, nCtx)
		for j := range s {
			if j < h {
				s[j] = 1 + j
			} else {
				s[j] = 1 + L + j
			}
		}
		slots[r] = s
	}
	e, err := NewEncoder(m, moved, nCtx)
	if err != nil {
		return nil, err
	}
	// redo the context bookkeeping at the moved slots
	D, T := e.D, e.T
	full := make([]float32, R*ctxLen*D)
	if err := m.Text.TokenEmbed(full, moved, R); err != nil {
		return nil, fmt.Errorf("prompt: %w", err)
	}
	for r := 0; r < R; r++ {
		row := e.base[r*T*D : (r+1)*T*D]
		copy(row, full[r*ctxLen*D:r*ctxLen*D+T*D])
		for i, p := range m.Text.W.PosEmb[:T*D] {
			row[i] += p
		}
		for j, t := range slots[r] {
			copy(e.tokCtx[(r*nCtx+j)*D:(r*nCtx+j+1)*D], full[(r*ctxLen+t)*D:(r*ctxLen+t+1)*D])
			clear(row[t*D : (t+1)*D])
			copy(row[t*D:(t+1)*D], m.Text.W.PosEmb[t*D:(t+1)*D]) // the context replaces the embedding
		}
	}
	e.slots = slots
	return e, nil
}

// NewEncoder prepares tokens [R, Ctx] (R = len(tokens)/Ctx rows) of the
// text tower of m for context vectors at positions 1..nCtx. Each row's EOT
// (its largest id) must come after the context. The model's weights are
// shared, never written; their products (forward and input gradient) run
// in the precision the model has now (Model.SetPrecision: bfloat16 with
// float32 accumulation under gemm.BF16).
func NewEncoder(m *clip.Model, tokens []int, nCtx int) (*Encoder, error) {
	cfg := m.Text.Cfg
	ctxLen, D := cfg.ContextLength, cfg.Width
	if nCtx < 1 {
		return nil, fmt.Errorf("prompt: n_ctx %d: must be at least 1", nCtx)
	}
	if len(tokens) == 0 || len(tokens)%ctxLen != 0 {
		return nil, fmt.Errorf("prompt: %d token ids is not a whole number of %d-long rows", len(tokens), ctxLen)
	}
	R := len(tokens) / ctxLen
	eot := clip.EOTPositions(tokens, R, ctxLen)
	T := 0
	for r, p := range eot {
		if p <= nCtx {
			return nil, fmt.Errorf("prompt: token row %d: EOT at position %d, but the %d context tokens take positions 1..%d", r, p, nCtx, nCtx)
		}
		T = max(T, p+1)
	}
	e := &Encoder{R: R, NCtx: nCtx, D: D, E: m.W.Config.EmbedDim, T: T, eot: eot, first: make([]int, R)}
	for r := range e.first {
		e.first[r] = tokens[r*ctxLen]
	}
	e.text = clip.Text{Cfg: cfg, W: m.Text.W}
	for _, b := range m.Text.Stack.Blocks {
		e.text.Stack.Blocks = append(e.text.Stack.Blocks, b.FrozenCopy()) // the model's precision
	}

	// Embeddings of the full rows, then cut to T and add the positions.
	full := make([]float32, R*ctxLen*D)
	if err := m.Text.TokenEmbed(full, tokens, R); err != nil {
		return nil, fmt.Errorf("prompt: %w", err)
	}
	e.base = make([]float32, R*T*D)
	e.tokCtx = make([]float32, R*nCtx*D)
	for r := 0; r < R; r++ {
		copy(e.tokCtx[r*nCtx*D:(r+1)*nCtx*D], full[(r*ctxLen+1)*D:(r*ctxLen+1+nCtx)*D])
		row := e.base[r*T*D : (r+1)*T*D]
		copy(row, full[r*ctxLen*D:r*ctxLen*D+T*D])
		clear(row[D : (1+nCtx)*D]) // the context replaces these embeddings
		for i, p := range m.Text.W.PosEmb[:T*D] {
			row[i] += p
		}
	}
	return e, nil
}

// TokenContext returns the frozen token embeddings at the context positions
// of every row, [R, NCtx, D] (for FedPGP's anchor: Forward(TokenContext(), R,
// false) encodes the literal prompts). The slice is owned by the encoder.
func (e *Encoder) TokenContext() []float32 { return e.tokCtx }

// EOT returns the EOT position of every row ([R], owned by the encoder).
func (e *Encoder) EOT() []int { return e.eot }

// Forward encodes the rows with context vectors ctx [G, NCtx, D]: the R rows
// form G equal consecutive groups and row r uses ctx[r / (R/G)] (G = 1: one
// context shared by every class; G = R: class-specific contexts; FedPGP's
// N·C rows use G = N). It returns the raw text features [R, E] (owned by the
// encoder, valid until the next Forward). With train set the activations are
// kept for Backward.
func (e *Encoder) Forward(ctx []float32, G int, train bool) ([]float32, error) {
	R, T, D, n := e.R, e.T, e.D, e.NCtx
	if G < 1 || R%G != 0 {
		return nil, fmt.Errorf("prompt: %d context groups do not divide %d prompt rows", G, R)
	}
	if len(ctx) != G*n*D {
		return nil, fmt.Errorf("prompt: context has %d values, want %d groups × %d × %d = %d", len(ctx), G, n, D, G*n*D)
	}
	e.groups = G
	per := R / G
	if e.usedPack = e.canShare(G); e.usedPack {
		if e.shared == nil || e.shared.G != G {
			e.shared = newSharedPrefix(e.eot, G, 1+n)
		}
		e.xp = nn.Grow(e.xp, e.shared.N*D)
		e.shared.pack(e.xp, e.base, ctx, R, T, D)
		pooled := e.shared.forward(e.text.Stack.Blocks, e.xp, R)
		e.feat = nn.Grow(e.feat, R*e.E)
		e.text.HeadForward(e.feat, pooled, R)
		return e.feat, nil
	}
	// x0[r, t] = base[r, t] (+ ctx[g, t−1] for t in 1..n)          [R, T, D]
	e.x0 = nn.Grow(e.x0, R*T*D)
	copy(e.x0, e.base)
	for r := 0; r < R; r++ {
		c := ctx[(r/per)*n*D : (r/per+1)*n*D]
		if e.slots != nil {
			for j, t := range e.slots[r] {
				x := e.x0[(r*T+t)*D : (r*T+t+1)*D]
				for i, v := range c[j*D : (j+1)*D] {
					x[i] += v
				}
			}
			continue
		}
		x := e.x0[(r*T+1)*D : (r*T+1+n)*D]
		for i, v := range c {
			x[i] = v + x[i]
		}
	}
	pooled := e.text.Stack.Forward(e.x0, R, T, 0, len(e.text.Stack.Blocks), e.eot, train)
	e.feat = nn.Grow(e.feat, R*e.E)
	e.text.HeadForward(e.feat, pooled, R)
	return e.feat, nil
}

// Backward takes dfeat [R, E], the gradient of the loss with respect to the
// features of the last train-mode Forward, and returns the gradient with
// respect to its context vectors, [G, NCtx, D] (owned by the encoder,
// overwritten by each call; the rows of a group are summed).
func (e *Encoder) Backward(dfeat []float32) []float32 {
	R, T, D, n, G := e.R, e.T, e.D, e.NCtx, e.groups
	dpool := e.text.HeadBackward(dfeat[:R*e.E])
	e.dctx = nn.Grow(e.dctx, G*n*D)
	if e.usedPack {
		// a group's prefix rows hold the sum over its rows already
		dx := e.shared.backward(e.text.Stack.Blocks, dpool)
		P := 1 + n
		for g := 0; g < G; g++ {
			copy(e.dctx[g*n*D:(g+1)*n*D], dx[(g*P+1)*D:(g+1)*P*D])
		}
		return e.dctx
	}
	e.dx0 = nn.Grow(e.dx0, R*T*D)
	clear(e.dx0)
	e.text.Stack.Backward(e.dx0, dpool)
	clear(e.dctx)
	per := R / G
	for r := 0; r < R; r++ {
		dst := e.dctx[(r/per)*n*D : (r/per+1)*n*D]
		if e.slots != nil {
			for j, t := range e.slots[r] {
				for i, v := range e.dx0[(r*T+t)*D : (r*T+t+1)*D] {
					dst[j*D+i] += v
				}
			}
			continue
		}
		for i, v := range e.dx0[(r*T+1)*D : (r*T+1+n)*D] {
			dst[i] += v
		}
	}
	return e.dctx
}

// canShare reports whether the shared-prefix path applies to G groups: some
// group has more than one row, and every group's rows start with the same
// token (so their first 1+NCtx positions are equal).
func (e *Encoder) canShare(G int) bool {
	if e.noShare || e.slots != nil || G >= e.R {
		return false
	}
	per := e.R / G
	for r, t := range e.first {
		if t != e.first[(r/per)*per] {
			return false
		}
	}
	return true
}
