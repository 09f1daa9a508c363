package pretrain

import (
	"math"

	"github.com/pfedmma/pfedmma/clip"
)

// InfoNCE is CLIP's symmetric contrastive loss over a batch of B matched
// (image, text) pairs: with logits = exp(logitScale)·cos(img_i, txt_j)
// [B, B], it is the mean of the image→text cross-entropy (rows, target i)
// and the text→image cross-entropy (columns, target j), averaged over the
// two directions.
//
// img and txt are raw (unnormalised) features [B, E]. The gradients with
// respect to them are written into dImg and dTxt ([B, E], overwritten); the
// gradient with respect to logitScale is returned as dScale. The function
// also reports the number of rows whose image→text argmax is the matching
// text (batch accuracy).
func InfoNCE(img, txt []float32, B, E int, logitScale float32, dImg, dTxt []float32) (loss float64, dScale float64, correct int) {
	s := float32(math.Exp(float64(logitScale)))
	ni := append([]float32(nil), img[:B*E]...)
	nt := append([]float32(nil), txt[:B*E]...)
	normI := clip.Normalize(ni, B, E)
	normT := clip.Normalize(nt, B, E)
	// logits[i, j] = s · î_i · t̂_j                            [B, B]
	logits := make([]float64, B*B)
	for i := 0; i < B; i++ {
		for j := 0; j < B; j++ {
			var dot float32
			a, b := ni[i*E:i*E+E], nt[j*E:j*E+E]
			for k := range a {
				dot += a[k] * b[k]
			}
			logits[i*B+j] = float64(s) * float64(dot)
		}
	}
	// dl = ½ (softmax_rows − I)/B + ½ (softmax_cols − I)/B
	dl := make([]float64, B*B)
	half := 0.5 / float64(B)
	for i := 0; i < B; i++ { // image → text: row i, target i
		row := logits[i*B : i*B+B]
		mx, arg := row[0], 0
		for j, v := range row {
			if v > mx {
				mx, arg = v, j
			}
		}
		if arg == i {
			correct++
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(v - mx)
		}
		lse := mx + math.Log(sum)
		loss += (lse - row[i]) * half
		for j, v := range row {
			dl[i*B+j] += math.Exp(v-lse) * half
		}
		dl[i*B+i] -= half
	}
	for j := 0; j < B; j++ { // text → image: column j, target j
		mx := logits[j]
		for i := 0; i < B; i++ {
			mx = max(mx, logits[i*B+j])
		}
		var sum float64
		for i := 0; i < B; i++ {
			sum += math.Exp(logits[i*B+j] - mx)
		}
		lse := mx + math.Log(sum)
		loss += (lse - logits[j*B+j]) * half
		for i := 0; i < B; i++ {
			dl[i*B+j] += math.Exp(logits[i*B+j]-lse) * half
		}
		dl[j*B+j] -= half
	}
	// ∂loss/∂logitScale = Σ dl_ij · logits_ij (logits are linear in s = e^ls)
	for i, g := range dl {
		dScale += g * logits[i]
	}
	// dî_i = s Σ_j dl_ij t̂_j ; dt̂_j = s Σ_i dl_ij î_i
	dni, dnt := make([]float32, B*E), make([]float32, B*E)
	for i := 0; i < B; i++ {
		for j := 0; j < B; j++ {
			g := s * float32(dl[i*B+j])
			a, b := ni[i*E:i*E+E], nt[j*E:j*E+E]
			da, db := dni[i*E:i*E+E], dnt[j*E:j*E+E]
			for k := range a {
				da[k] += g * b[k]
				db[k] += g * a[k]
			}
		}
	}
	clip.NormBackward(dImg, dni, ni, normI, B, E)
	clip.NormBackward(dTxt, dnt, nt, normT, B, E)
	return loss, dScale, correct
}

// DensePool is the dense image feature of the patch-token term: for each of
// B images, the mean over its patch tokens (positions 1..T-1; position 0 is
// the class token) of their unit-normalised features. feat is every token's
// ln_post→proj output [B·T, E]; out receives [B, E].
func DensePool(out, feat []float32, B, T, E int) {
	P := float32(T - 1)
	for b := range B {
		o := out[b*E : b*E+E]
		clear(o)
		for p := 1; p < T; p++ {
			x := feat[(b*T+p)*E : (b*T+p+1)*E]
			inv := 1 / (norm(x) * P)
			for k, v := range x {
				o[k] += v * inv
			}
		}
	}
}

// DensePoolBackward adds to dFeat [B·T, E] the gradient of DensePool's
// output dOut [B, E] with respect to the patch tokens' features (class-token
// rows are left alone): dx = (dn − n̂(n̂·dn))/‖x‖ with dn = dOut/(T−1).
func DensePoolBackward(dFeat, dOut, feat []float32, B, T, E int) {
	P := float32(T - 1)
	for b := range B {
		dn := dOut[b*E : b*E+E]
		for p := 1; p < T; p++ {
			x := feat[(b*T+p)*E : (b*T+p+1)*E]
			dx := dFeat[(b*T+p)*E : (b*T+p+1)*E]
			nr := norm(x)
			var dot float32 // n̂·dn
			for k, v := range x {
				dot += v / nr * dn[k]
			}
			for k, v := range x {
				dx[k] += (dn[k] - v/nr*dot) / (nr * P)
			}
		}
	}
}

// DenseLoss is the patch-token contrastive term: InfoNCE between each
// image's DensePool feature and the captions' features txt [B, E], so that
// ln_post→proj patch tokens align with the text of what they show. feat is
// every token's feature [B·T, E]. The gradients are added to dFeat [B·T, E]
// (patch rows) and written into dTxt [B, E]; the gradient with respect to
// logitScale is returned.
func DenseLoss(feat, txt []float32, B, T, E int, logitScale float32, dFeat, dTxt []float32) (loss, dScale float64) {
	pooled := make([]float32, B*E)
	DensePool(pooled, feat, B, T, E)
	dPooled := make([]float32, B*E)
	loss, dScale, _ = InfoNCE(pooled, txt, B, E, logitScale, dPooled, dTxt)
	DensePoolBackward(dFeat, dPooled, feat, B, T, E)
	return loss, dScale
}

func norm(x []float32) float32 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return float32(math.Sqrt(s))
}
