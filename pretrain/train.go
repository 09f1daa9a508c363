package pretrain

import (
	"fmt"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/optim"
)

// trainer holds a model in training: its gradients, the two AdamW groups
// and the reused activation-gradient buffers.
type trainer struct {
	opts     Options
	m        *clip.Model
	g        *clip.Weights
	ls, gls  []float32 // logit scale and its gradient
	params   paramSet
	decay    *optim.AdamW
	noDecay  *optim.AdamW
	sched    optim.Cosine
	imgFeat  []float32
	txtFeat  []float32
	dImg     []float32
	dTxt     []float32
	dx0v     []float32
	dx0t     []float32
	emb      []float32
	step     int // steps done
	lastNorm float64

	// the dense term's buffers: every token's features and gradients
	tokFeat, dTok, dTxtDense []float32
}

func newTrainer(opts Options, w *clip.Weights) *trainer {
	m := clip.New(w)
	g := m.EnableGrads()
	t := &trainer{opts: opts, m: m, g: g, ls: []float32{w.LogitScale}, gls: make([]float32, 1)}
	t.params = newParamSet(w, g, t.ls, t.gls)
	t.decay, t.noDecay = newAdamW(opts.WeightDecay), newAdamW(0)
	t.sched = optim.Cosine{Base: opts.LR, Min: opts.MinLR, Warmup: opts.Warmup, Total: opts.Steps}
	return t
}

// newAdamW returns AdamW with CLIP's β2 0.98 and eps 1e-6.
func newAdamW(wd float64) *optim.AdamW {
	o := optim.NewAdamW(wd)
	o.Beta2, o.Eps = 0.98, 1e-6
	return o
}

// stepResult is what one optimisation step reports.
type stepResult struct {
	loss     float64
	batchAcc float64
	lr       float64
}

// trainStep runs forward, backward and one AdamW update on batch b.
func (t *trainer) trainStep(b *batch) (stepResult, error) {
	loss, correct, err := t.forwardBackward(b)
	if err != nil {
		return stepResult{}, err
	}
	B := t.opts.Batch
	if t.opts.ClipNorm > 0 {
		t.lastNorm = optim.ClipGradNorm(t.params.all(), t.opts.ClipNorm)
	}
	lr := t.sched.LR(t.step)
	if err := t.decay.Step(lr, t.params.decay); err != nil {
		return stepResult{}, fmt.Errorf("pretrain: step %d: %w", b.step, err)
	}
	if err := t.noDecay.Step(lr, t.params.noDecay); err != nil {
		return stepResult{}, fmt.Errorf("pretrain: step %d: %w", b.step, err)
	}
	t.ls[0] = min(max(t.ls[0], 0), maxLogitScale)
	t.m.W.LogitScale = t.ls[0]
	t.step++
	return stepResult{loss: loss, batchAcc: float64(correct) / float64(B), lr: lr}, nil
}

// forwardBackward zeroes the gradients, runs both towers forward on batch
// b, and back-propagates the loss (the class-token InfoNCE, plus
// DenseWeight × DenseLoss) into every weight's gradient and the logit
// scale's. It returns the loss and the batch's correct image→text matches.
func (t *trainer) forwardBackward(b *batch) (float64, int, error) {
	c := t.m.W.Config
	B := t.opts.Batch
	E := c.EmbedDim
	v, tx := t.m.Vision, t.m.Text
	optim.ZeroGrad(t.params.decay)
	optim.ZeroGrad(t.params.noDecay)

	// image tower: pixels → x0 [B, T, Dv] → pooled class token → features
	// (with the dense term: every token → features [B·T, E])
	Tv, Dv := c.Vision.Tokens(), c.Vision.Width
	dense := t.opts.DenseWeight > 0
	x0 := v.EmbedForward(b.pixels, B)
	if dense {
		tokens := v.Stack.Forward(x0, B, Tv, 0, len(v.Stack.Blocks), nil, true)
		t.tokFeat = grow(t.tokFeat, B*Tv*E)
		v.HeadForward(t.tokFeat, tokens, B*Tv)
		t.imgFeat = grow(t.imgFeat, B*E)
		for i := range B { // the class tokens' features
			copy(t.imgFeat[i*E:i*E+E], t.tokFeat[i*Tv*E:i*Tv*E+E])
		}
	} else {
		pooled := v.Stack.Forward(x0, B, Tv, 0, len(v.Stack.Blocks), clip.ClassPool(B), true)
		t.imgFeat = grow(t.imgFeat, B*E)
		v.HeadForward(t.imgFeat, pooled, B)
	}

	// text tower: tokens → e [B, C, Dt] → pooled EOT token → features
	C, Dt := c.Text.ContextLength, c.Text.Width
	t.emb = grow(t.emb, B*C*Dt)
	if err := tx.TokenEmbed(t.emb, b.tokens, B); err != nil {
		return 0, 0, fmt.Errorf("pretrain: step %d: %w", b.step, err)
	}
	x0t := tx.EmbedForward(t.emb, B)
	pooledT := tx.Stack.Forward(x0t, B, C, 0, len(tx.Stack.Blocks), clip.EOTPositions(b.tokens, B, C), true)
	t.txtFeat = grow(t.txtFeat, B*E)
	tx.HeadForward(t.txtFeat, pooledT, B)

	t.dImg, t.dTxt = grow(t.dImg, B*E), grow(t.dTxt, B*E)
	loss, dScale, correct := InfoNCE(t.imgFeat, t.txtFeat, B, E, t.ls[0], t.dImg, t.dTxt)
	dFeat := t.dImg
	if dense {
		// the class rows carry InfoNCE's gradient, the patch rows λ × the
		// dense term's; the captions get both
		t.dTok = grow(t.dTok, B*Tv*E)
		clear(t.dTok)
		t.dTxtDense = grow(t.dTxtDense, B*E)
		dl, ds := DenseLoss(t.tokFeat, t.txtFeat, B, Tv, E, t.ls[0], t.dTok, t.dTxtDense)
		w := float32(t.opts.DenseWeight)
		for i := range t.dTok {
			t.dTok[i] *= w
		}
		for i := range B {
			copy(t.dTok[i*Tv*E:i*Tv*E+E], t.dImg[i*E:i*E+E])
		}
		for i, g := range t.dTxtDense {
			t.dTxt[i] += w * g
		}
		loss += t.opts.DenseWeight * dl
		dScale += t.opts.DenseWeight * ds
		dFeat = t.dTok
	}
	t.gls[0] = float32(dScale)

	dpool := v.HeadBackward(dFeat)
	t.dx0v = grow(t.dx0v, B*Tv*Dv)
	clear(t.dx0v)
	v.Stack.Backward(t.dx0v, dpool)
	v.EmbedBackward(t.dx0v)

	dpoolT := tx.HeadBackward(t.dTxt)
	t.dx0t = grow(t.dx0t, B*C*Dt)
	clear(t.dx0t)
	tx.Stack.Backward(t.dx0t, dpoolT)
	de := tx.EmbedBackward(t.dx0t)
	tx.TokenEmbedBackward(de, b.tokens, B)
	return loss, correct, nil
}

func grow(buf []float32, n int) []float32 {
	if cap(buf) >= n {
		return buf[:n]
	}
	return make([]float32, n)
}
