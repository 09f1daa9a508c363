package fedot

import (
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/nn"
)

// Head is FedOT's classifier on transformed features:
//
//	logits [B, C] = τ · (h'/‖h'‖) · wᵀ,   w [C, d]
//
// (the paper's softmax(τ w_g h'/‖h'‖)); with Cosine the rows of w are
// L2-normalised too (logits = τ·cos). Forward keeps the normalised rows and
// norms Backward needs, in reused buffers.
type Head struct {
	Cosine    bool
	hn, hnorm []float32 // ĥ [B, d], ‖h'‖ [B]
	wn, wnorm []float32 // ŵ [C, d] and ‖w_c‖ [C] (Cosine)
	dhn, dwn  []float32
	w         []float32
	B, C, D   int
	tau       float32
}

// Forward writes logits [B, C] for features h [B, d] and classifier w [C, d].
func (hd *Head) Forward(logits, h, w []float32, B, C, d int, tau float32) {
	hd.B, hd.C, hd.D, hd.tau, hd.w = B, C, d, tau, w
	hd.hn = append(hd.hn[:0], h[:B*d]...)
	hd.hnorm = clip.NormalizeRows(hd.hnorm, hd.hn, B, d)
	wn := w[:C*d]
	if hd.Cosine {
		hd.wn = append(hd.wn[:0], wn...)
		hd.wnorm = clip.NormalizeRows(hd.wnorm, hd.wn, C, d)
		wn = hd.wn
	}
	gemm.Sgemm(false, true, B, C, d, tau, hd.hn, d, wn, d, 0, logits, C)
}

// Backward accumulates dh [B, d] and dw [C, d] (either may be nil) from
// dlogits [B, C].
func (hd *Head) Backward(dh, dw, dlogits []float32) {
	B, C, d, tau := hd.B, hd.C, hd.D, hd.tau
	wn := hd.w[:C*d]
	if hd.Cosine {
		wn = hd.wn
	}
	if dh != nil {
		// dĥ = τ dlogits · ŵ; dh += (dĥ − ĥ(ĥ·dĥ))/‖h‖
		hd.dhn = nn.Grow(hd.dhn, B*d)
		gemm.Sgemm(false, false, B, d, C, tau, dlogits, C, wn, d, 0, hd.dhn, d)
		accumulateNormBackward(dh, hd.dhn, hd.hn, hd.hnorm, B, d)
	}
	if dw == nil {
		return
	}
	if !hd.Cosine {
		gemm.Sgemm(true, false, C, d, B, tau, dlogits, C, hd.hn, d, 1, dw, d) // dw += τ dlogitsᵀ ĥ
		return
	}
	hd.dwn = nn.Grow(hd.dwn, C*d)
	gemm.Sgemm(true, false, C, d, B, tau, dlogits, C, hd.hn, d, 0, hd.dwn, d)
	accumulateNormBackward(dw, hd.dwn, hd.wn, hd.wnorm, C, d)
}

// accumulateNormBackward adds to dx [n, d] the gradient through x̂ = x/‖x‖
// given dx̂ (clip.NormBackward overwrites; the scratch row keeps this
// accumulating).
func accumulateNormBackward(dx, dn, nhat, norms []float32, n, d int) {
	tmp := make([]float32, d)
	for i := 0; i < n; i++ {
		clip.NormBackward(tmp, dn[i*d:(i+1)*d], nhat[i*d:(i+1)*d], norms[i:i+1], 1, d)
		row := dx[i*d : (i+1)*d]
		for k, v := range tmp {
			row[k] += v
		}
	}
}
