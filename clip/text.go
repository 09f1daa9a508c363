package clip

import "fmt"

// Text is the causal text transformer with its run-time buffers.
//
//	tokens [B, Ctx] → token embedding e [B, Ctx, D] → x0 = e + pos
//	→ causal blocks → ln_final(EOT token) → @ text_projection → features [B, E]
//
// The EOT token of a row is the position of its largest token id.
type Text struct {
	Cfg   TextConfig
	W     *TextWeights
	G     *TextWeights // gradients of embeddings and head (+=); nil when frozen
	Stack Stack
	// EmbedAdapter, when set, is pFedMMA's index-0 adapter on the token
	// embeddings, before the positional embedding: e' = e + A(e).
	EmbedAdapter Adapter

	x0, eIn, de []float32
	embB        int
	head        projHead // ln_final, text_projection
}

// EOTPositions returns, for each row of tokens [B, Ctx], the position of its
// largest id (CLIP's end-of-text pooling).
func EOTPositions(tokens []int, B, ctx int) []int {
	pos := make([]int, B)
	for b := 0; b < B; b++ {
		row := tokens[b*ctx : b*ctx+ctx]
		best := 0
		for i, t := range row {
			if t > row[best] {
				best = i
			}
		}
		pos[b] = best
	}
	return pos
}

// TokenEmbed looks up the token embeddings of tokens [B, Ctx] into e
// [B, Ctx, D]. It returns an error for an id outside the vocabulary.
func (t *Text) TokenEmbed(e []float32, tokens []int, B int) error {
	D, V := t.Cfg.Width, t.Cfg.VocabSize
	for i, id := range tokens[:B*t.Cfg.ContextLength] {
		if id < 0 || id >= V {
			return fmt.Errorf("clip: token %d at position %d is outside the vocabulary of %d", id, i, V)
		}
		copy(e[i*D:i*D+D], t.W.TokenEmb[id*D:id*D+D])
	}
	return nil
}

// EmbedForward turns token embeddings e [B, Ctx, D] (looked up, or partly
// learned prompts) into the first block's input x0 = e [+ A(e)] + pos
// (owned by the encoder). e is kept by reference for EmbedBackward.
func (t *Text) EmbedForward(e []float32, B int) []float32 {
	D, C := t.Cfg.Width, t.Cfg.ContextLength
	t.embB, t.eIn = B, e
	t.x0 = growF(t.x0, B*C*D)
	copy(t.x0, e[:B*C*D])
	if t.EmbedAdapter != nil {
		t.EmbedAdapter.Forward(t.x0, e[:B*C*D], B*C)
	}
	for b := 0; b < B; b++ {
		row := t.x0[b*C*D : (b+1)*C*D]
		for i, p := range t.W.PosEmb[:C*D] {
			row[i] += p
		}
	}
	return t.x0
}

// EmbedBackward takes dx0 [B, Ctx, D] and returns the gradient with respect
// to the token embeddings e (owned by the encoder), accumulating the
// positional-embedding gradient when G is set and the index-0 adapter's.
func (t *Text) EmbedBackward(dx0 []float32) []float32 {
	B, D, C := t.embB, t.Cfg.Width, t.Cfg.ContextLength
	n := B * C * D
	t.de = growF(t.de, n)
	copy(t.de, dx0[:n])
	if t.EmbedAdapter != nil {
		t.EmbedAdapter.Backward(t.de, dx0[:n], B*C)
	}
	if t.G != nil {
		for b := 0; b < B; b++ {
			for i, g := range dx0[b*C*D : (b+1)*C*D] {
				t.G.PosEmb[i] += g
			}
		}
	}
	return t.de
}

// TokenEmbedBackward accumulates de [B, Ctx, D] into the token-embedding
// gradient rows of tokens (full training only; needs G).
func (t *Text) TokenEmbedBackward(de []float32, tokens []int, B int) {
	if t.G == nil {
		return
	}
	D := t.Cfg.Width
	for i, id := range tokens[:B*t.Cfg.ContextLength] {
		dst := t.G.TokenEmb[id*D : id*D+D]
		for j, g := range de[i*D : i*D+D] {
			dst[j] += g
		}
	}
}

// HeadForward maps the EOT-token outputs pooled [B, D] to text features
// feat [B, E] = ln_final(pooled) @ text_projection.
func (t *Text) HeadForward(feat, pooled []float32, B int) {
	t.head.forward(feat, pooled, B, t.Cfg.Width, t.W.LnFinalW, t.W.LnFinalB, t.W.Proj)
}

// HeadBackward takes dfeat [B, E] and returns the gradient with respect to
// the pooled EOT tokens [B, D] (owned by the encoder).
func (t *Text) HeadBackward(dfeat []float32) []float32 {
	var dProj, dLnW, dLnB []float32
	if t.G != nil {
		dProj, dLnW, dLnB = t.G.Proj, t.G.LnFinalW, t.G.LnFinalB
	}
	return t.head.backward(dfeat, t.W.LnFinalW, t.W.Proj, dLnW, dLnB, dProj)
}

// Encode runs the whole text encoder on tokens [B, Ctx] and writes the
// features [B, E] into feat (inference; the last block is pruned to the EOT
// token, and every sequence is cut after the last EOT of the batch — exact
// under the causal mask).
func (t *Text) Encode(feat []float32, tokens []int, B int) error {
	C, D := t.Cfg.ContextLength, t.Cfg.Width
	e := make([]float32, B*C*D)
	if err := t.TokenEmbed(e, tokens, B); err != nil {
		return err
	}
	x0 := t.EmbedForward(e, B)
	eot := EOTPositions(tokens, B, C)
	T := 0
	for _, p := range eot {
		T = max(T, p+1)
	}
	if T < C {
		for b := 1; b < B; b++ { // repack [B, C, D] → [B, T, D] in place
			copy(x0[b*T*D:(b+1)*T*D], x0[b*C*D:b*C*D+T*D])
		}
		C = T
	}
	pooled := t.Stack.Forward(x0, B, C, 0, len(t.Stack.Blocks), eot, false)
	t.HeadForward(feat, pooled, B)
	return nil
}
