package fedotp

import (
	"fmt"
	"math"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/ot"
)

// Head is FedOTP's classifier: optimal transport between the patches of an
// image and the N prompts of a class.
//
//	p̂[b, m]   = patch m+1 of image b, L2-normalised     imgTok [B, T, E], M = T − 1
//	t̂[n·C+c]  = text feature of prompt n, class c, L2-normalised   txt [N·C, E]
//	sim[(b·C+c), m, n] = ⟨p̂[b, m], t̂[n·C+c]⟩                       [B·C, M, N]
//	plan      = ot(sim)  (constant: no gradient)                    [B·C, M, N]
//	logits[b, c] = exp(logitScale) · Σ_{m,n} plan · sim              [B, C]
//
// Forward keeps what Backward needs; buffers are reused between calls.
type Head struct {
	OT ot.Config

	solver       ot.Solver
	res          ot.Result
	patch        []float32 // p̂ [B·M, E]
	txt, norms   []float32 // t̂ [N·C, E] and the raw rows' norms [N·C]
	st, sim      []float32 // sim as [B·M, N·C] (GEMM layout) and [B·C, M, N]
	plan, logits []float32
	dst, dtn     []float32 // ∂L/∂st [B·M, N·C], ∂L/∂t̂ [N·C, E]
	dtxt         []float32
	B, C, M, N   int
	E            int
	s            float32
	keepPlan     bool
}

// Forward returns logits [B, C] (owned by h) for every-token image features
// imgTok [B, T, E] (token 0, the class token, is not used) and raw text
// features txt [N·C, E] (rows prompt-major).
func (h *Head) Forward(imgTok []float32, B, T int, txt []float32, N, C, E int, logitScale float32) ([]float32, error) {
	M := T - 1
	if B < 1 || M < 1 || N < 1 || C < 1 || E < 1 {
		return nil, fmt.Errorf("fedotp: head shapes B %d, T %d, N %d, C %d, E %d must be positive (T ≥ 2)", B, T, N, C, E)
	}
	if len(imgTok) != B*T*E {
		return nil, fmt.Errorf("fedotp: image features have %d values, want [%d, %d, %d]", len(imgTok), B, T, E)
	}
	if len(txt) != N*C*E {
		return nil, fmt.Errorf("fedotp: text features have %d values, want [%d·%d, %d]", len(txt), N, C, E)
	}
	h.B, h.C, h.M, h.N, h.E = B, C, M, N, E
	h.s = float32(math.Exp(float64(logitScale)))
	// p̂: the patches, normalised (no gradient: the image side is frozen)
	h.patch = nn.Grow(h.patch, B*M*E)
	for b := 0; b < B; b++ {
		copy(h.patch[b*M*E:(b+1)*M*E], imgTok[(b*T+1)*E:(b+1)*T*E])
	}
	clip.NormalizeRows(nil, h.patch, B*M, E)
	h.txt = nn.Grow(h.txt, N*C*E)
	copy(h.txt, txt)
	h.norms = clip.NormalizeRows(h.norms, h.txt, N*C, E)
	// st = p̂ · t̂ᵀ                                      [B·M, N·C]
	h.st = nn.Grow(h.st, B*M*N*C)
	gemm.MatMul(false, true, B*M, N*C, E, h.patch, h.txt, h.st, false)
	// sim[(b·C+c), m, n] = st[b·M+m, n·C+c]
	h.sim = nn.Grow(h.sim, B*C*M*N)
	for b := 0; b < B; b++ {
		for c := 0; c < C; c++ {
			for m := 0; m < M; m++ {
				for n := 0; n < N; n++ {
					h.sim[((b*C+c)*M+m)*N+n] = h.st[(b*M+m)*N*C+n*C+c]
				}
			}
		}
	}
	if !h.keepPlan { // tests hold the plan fixed to check gradients
		h.plan = nn.Grow(h.plan, B*C*M*N)
		var err error
		if h.res, err = h.solver.Plan(h.plan, h.sim, B*C, M, N, h.OT); err != nil {
			return nil, fmt.Errorf("fedotp: %w", err)
		}
	}
	h.logits = nn.Grow(h.logits, B*C)
	otLogitsForward(h.logits, h.plan, h.sim, B*C, M*N, h.s)
	return h.logits, nil
}

// Plan returns the last transport plans [B·C, M, N] (owned by h).
func (h *Head) Plan() []float32 { return h.plan }

// Solve returns the last solve's iteration count and stopping change.
func (h *Head) Solve() ot.Result { return h.res }

// Backward takes dlogits [B, C] and returns the gradient with respect to
// the raw text features [N·C, E] (owned by h, overwritten by each call).
func (h *Head) Backward(dlogits []float32) []float32 {
	B, C, M, N, E := h.B, h.C, h.M, h.N, h.E
	h.dst = nn.Grow(h.dst, B*M*N*C)
	// ∂L/∂sim = s · dlogits[b, c] · plan, written in the GEMM layout
	for b := 0; b < B; b++ {
		for c := 0; c < C; c++ {
			g := h.s * dlogits[b*C+c]
			for m := 0; m < M; m++ {
				for n := 0; n < N; n++ {
					h.dst[(b*M+m)*N*C+n*C+c] = g * h.plan[((b*C+c)*M+m)*N+n]
				}
			}
		}
	}
	// ∂L/∂t̂ = dstᵀ · p̂                                 [N·C, E]
	h.dtn = nn.Grow(h.dtn, N*C*E)
	gemm.MatMul(true, false, N*C, E, B*M, h.dst, h.patch, h.dtn, false)
	h.dtxt = nn.Grow(h.dtxt, N*C*E)
	clip.NormBackward(h.dtxt, h.dtn, h.txt, h.norms, N*C, E)
	return h.dtxt
}

// otLogitsForward writes logits[p] = s · Σ_k plan[p, k] · sim[p, k] for P
// problems of K = M·N entries (the plan is a constant).
func otLogitsForward(logits, plan, sim []float32, P, K int, s float32) {
	for p := 0; p < P; p++ {
		var sum float64
		for k := p * K; k < (p+1)*K; k++ {
			sum += float64(plan[k]) * float64(sim[k])
		}
		logits[p] = s * float32(sum)
	}
}
