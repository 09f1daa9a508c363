package clip

import (
	"math"

	"github.com/pfedmma/pfedmma/nn"
)

// The frozen prefix of a model adapted from block ℓ on: everything before
// block ℓ does not depend on any trainable parameter, so it is computed once
// per image or prompt, cached, and shared by every client.

// ImagePrefix computes the frozen prefix of images: the input of the first
// adapted block, [B, T, Dv] (ln_pre output when ℓ ≤ 1). It does not depend
// on any adapter, so it can be cached per image and shared by all clients.
// The result is written into dst (allocated when nil) and returned.
func ImagePrefix(m *Model, start int, pixels []float32, B int, dst []float32) []float32 {
	v := m.Vision
	x0 := v.EmbedForward(pixels, B)
	out := x0
	if start > 1 {
		out = v.Stack.Forward(x0, B, v.Cfg.Tokens(), 0, start-1, nil, false)
	}
	dst = nn.Grow(dst, len(out))
	copy(dst, out)
	return dst
}

// TextPrefix computes the frozen prefix of tokenised prompts [C, Ctx]: the
// token embeddings when ℓ = 0, else the input of block ℓ, [C, Ctx, Dt].
func TextPrefix(m *Model, start int, tokens []int, C int) ([]float32, error) {
	t := m.Text
	n := C * t.Cfg.ContextLength * t.Cfg.Width
	e := make([]float32, n)
	if err := t.TokenEmbed(e, tokens, C); err != nil {
		return nil, err
	}
	if start == 0 {
		return e, nil
	}
	saved := t.EmbedAdapter
	t.EmbedAdapter = nil
	x0 := t.EmbedForward(e, C)
	t.EmbedAdapter = saved
	out := x0
	if start > 1 {
		out = t.Stack.Forward(x0, C, t.Cfg.ContextLength, 0, start-1, nil, false)
	}
	return append([]float32(nil), out...), nil
}

// TruncatePrefix cuts text activations [C, ctx, D] to [C, T, D] with T the
// last EOT position + 1. Under the causal mask no position attends to a
// later one, so the EOT outputs — all that CLIP pools — are unchanged, while
// the text blocks run on T instead of ctx tokens (about 10 instead of 77 for
// "a photo of a {class}."). It returns prefix itself when nothing can be cut.
func TruncatePrefix(prefix []float32, eot []int, C, ctx, D int) ([]float32, int) {
	T := 0
	for _, e := range eot[:C] {
		T = max(T, e+1)
	}
	if T >= ctx {
		return prefix, ctx
	}
	out := make([]float32, C*T*D)
	for c := 0; c < C; c++ {
		copy(out[c*T*D:(c+1)*T*D], prefix[c*ctx*D:c*ctx*D+T*D])
	}
	return out, T
}

// LogSumExp is log Σ exp(row), shifted by the row's maximum for range
// (float64 sum).
func LogSumExp(row []float32) float64 {
	mx := row[0]
	for _, v := range row {
		mx = max(mx, v)
	}
	var sum float64
	for _, v := range row {
		sum += math.Exp(float64(v - mx))
	}
	return float64(mx) + math.Log(sum)
}

// CrossEntropy returns the mean softmax cross-entropy of logits [B, C]
// against labels and, when dlogits is not nil, writes its gradient
// (softmax − onehot)/B there ([B, C], overwritten).
func CrossEntropy(logits []float32, labels []int, B, C int, dlogits []float32) float64 {
	var loss float64
	for i := 0; i < B; i++ {
		row := logits[i*C : i*C+C]
		lse := LogSumExp(row)
		loss += lse - float64(row[labels[i]])
		if dlogits != nil {
			for c, v := range row {
				dlogits[i*C+c] = float32(math.Exp(float64(v)-lse)) / float32(B)
			}
			dlogits[i*C+labels[i]] -= 1 / float32(B)
		}
	}
	return loss / float64(B)
}
