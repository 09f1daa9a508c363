package plot

import (
	"math"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/nn"
)

// globalHead is the global branch of PLOT's ImageNet path: the class's N
// raw text features averaged, normalised, against the image's global token.
//
//	ĝ[b]    = token 0 of image b, L2-normalised           imgTok [B, T, E]
//	t̄[c]    = normalise(1/N · Σ_n txt[n·C + c])             txt [N·C, E] → [C, E]
//	logits[b, c] += e^s · ⟨ĝ[b], t̄[c]⟩                      [B, C]
type globalHead struct {
	g, mean, norms []float32 // ĝ [B, E], t̄ [C, E], ‖mean‖ [C]
	dmean, dm      []float32 // ∂L/∂t̄, ∂L/∂mean [C, E]
	B, C, N, E     int
	s              float32
}

// Forward adds the global logits to logits [B, C].
func (h *globalHead) Forward(logits, imgTok []float32, B, T int, txt []float32, N, C, E int, logitScale float32) {
	h.B, h.C, h.N, h.E = B, C, N, E
	h.s = float32(math.Exp(float64(logitScale)))
	h.g = nn.Grow(h.g, B*E)
	for b := 0; b < B; b++ {
		copy(h.g[b*E:(b+1)*E], imgTok[b*T*E:(b*T+1)*E])
	}
	clip.NormalizeRows(nil, h.g, B, E)
	h.mean = nn.Grow(h.mean, C*E)
	clear(h.mean)
	for n := 0; n < N; n++ {
		for i, v := range txt[n*C*E : (n+1)*C*E] {
			h.mean[i] += v
		}
	}
	for i := range h.mean {
		h.mean[i] /= float32(N)
	}
	h.norms = clip.NormalizeRows(h.norms, h.mean, C, E)
	for b := 0; b < B; b++ {
		for c := 0; c < C; c++ {
			var dot float32
			for k := 0; k < E; k++ {
				dot += h.g[b*E+k] * h.mean[c*E+k]
			}
			logits[b*C+c] += h.s * dot
		}
	}
}

// Backward adds the branch's gradient to dtxt [N·C, E] for dlogits [B, C].
func (h *globalHead) Backward(dtxt, dlogits []float32) {
	B, C, N, E := h.B, h.C, h.N, h.E
	// ∂L/∂t̄[c] = e^s · Σ_b dlogits[b, c] · ĝ[b]
	h.dmean = nn.Grow(h.dmean, C*E)
	clear(h.dmean)
	for b := 0; b < B; b++ {
		for c := 0; c < C; c++ {
			w := h.s * dlogits[b*C+c]
			for k := 0; k < E; k++ {
				h.dmean[c*E+k] += w * h.g[b*E+k]
			}
		}
	}
	h.dm = nn.Grow(h.dm, C*E)
	clip.NormBackward(h.dm, h.dmean, h.mean, h.norms, C, E)
	// the mean spreads 1/N to each prompt's row
	for n := 0; n < N; n++ {
		for i, v := range h.dm {
			dtxt[n*C*E+i] += v / float32(N)
		}
	}
}
