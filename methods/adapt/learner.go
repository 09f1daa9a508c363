package adapt

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// Reference names of ADAPT's parameters.
const (
	// ParamVisual is the visual prompt tokens [n, Dv] (averaged).
	ParamVisual = "visual_prompt"
	// TextPrefix starts the per-domain text prompts "text_prompt.<i>"
	// [n_ctx, Dt] (relayed).
	TextPrefix = "text_prompt."
	// AdaLNPrefix starts the AdaLN weights "adaln.<l>.weight" [2E, E] and
	// "adaln.<l>.bias" [2E] (averaged).
	AdaLNPrefix = "adaln."
)

// TextName is the name of domain i's text prompt.
func TextName(i int) string { return fmt.Sprintf("%s%d", TextPrefix, i) }

// adaLNNames are the names of AdaLN layer l's weight and bias.
func adaLNNames(l int) (string, string) {
	return fmt.Sprintf("%s%d.weight", AdaLNPrefix, l), fmt.Sprintf("%s%d.bias", AdaLNPrefix, l)
}

// Config holds ADAPT's model settings.
type Config struct {
	Domains     int     // n: domains, text prompts and visual prompt tokens
	NCtx        int     // text prompt length m (16)
	InitStd     float64 // text prompts drawn N(0, InitStd²) (0.02)
	VisualStd   float64 // visual prompts drawn N(0, VisualStd²)
	Tau         float64 // τ_d of the domain weighting (0.1)
	Lambda      float64 // λ of the domain loss (1)
	AdaLN       bool    // condition the text features on the image (false)
	AdaLNLayers int     // number of AdaLN layers (3)
	Seed        uint64
}

// Validate names the first bad setting.
func (c Config) Validate() error {
	switch {
	case c.Domains < 1:
		return fmt.Errorf("adapt: %d domains: want at least 1", c.Domains)
	case c.NCtx < 1:
		return fmt.Errorf("adapt: n_ctx %d: want at least 1", c.NCtx)
	case !(c.Tau > 0) || math.IsInf(c.Tau, 0):
		return fmt.Errorf("adapt: tau %g: must be positive", c.Tau)
	case !(c.InitStd >= 0) || !(c.VisualStd >= 0) || !(c.Lambda >= 0) || math.IsInf(c.InitStd+c.VisualStd+c.Lambda, 0):
		return fmt.Errorf("adapt: init_std %g, visual_init_std %g, lambda %g: must not be negative", c.InitStd, c.VisualStd, c.Lambda)
	case c.AdaLN && c.AdaLNLayers < 1:
		return fmt.Errorf("adapt: adapt.adaln_layers %d: want at least 1", c.AdaLNLayers)
	}
	return nil
}

// InitParams draws the initial parameters of a model with text width dt,
// image width dv and feature dimension e: the text prompts
// N(0, InitStd²) (one stream per domain), the visual prompts
// N(0, VisualStd²), AdaLN at zero.
func InitParams(c Config, dt, dv, e int) tensor.Named {
	p := tensor.Named{}
	for i := 0; i < c.Domains; i++ {
		t := tensor.New(c.NCtx, dt)
		fillNormal(t.Data, c.InitStd, c.Seed, 0x7e47+uint64(i))
		p[TextName(i)] = t
	}
	v := tensor.New(c.Domains, dv)
	fillNormal(v.Data, c.VisualStd, c.Seed, 0x71507)
	p[ParamVisual] = v
	if c.AdaLN {
		for l := 0; l < c.AdaLNLayers; l++ {
			w, b := adaLNNames(l)
			p[w], p[b] = tensor.New(2*e, e), tensor.New(2*e)
		}
	}
	return p
}

// Learner computes ADAPT's loss and gradients for one label space (its
// class prompts) on a frozen CLIP. It holds no parameters: every call takes
// a client's parameters P (names as InitParams) and writes the gradients
// into G (same names and shapes). Clients of a run share one Learner per
// label space and use it one at a time; it is not safe for concurrent use.
type Learner struct {
	Cfg        Config
	LogitScale float32 // log of the logit multiplier (the model's)

	C, E, Dt, Dv int
	pv           *clip.PromptedVision
	own          *prompt.Encoder // C rows: the trained prompt
	rest         *prompt.Encoder // (n−1)·C rows: the other prompts (nil when n = 1)
	all          *prompt.Encoder // n·C rows: every prompt (inference)

	// activations of the last forward pass
	B                      int
	feat, q, k             []float32 // owned by pv
	a, w                   []float32 // [B, n] scores, weights
	qn, kn, qnorm, knorm   []float32
	raw, u, unorm          []float32 // [n, C, E] raw, normalised text features
	ctx                    []float32 // [n−1, NCtx, Dt] the other prompts
	mix, txt               []float32 // [B, C, E]
	vn, tn, vnorm, tnorm   []float32
	cond, condNorm, logits []float32
	ada                    adaLN
	// gradients
	dl, da, dw, dq, dk, du, dm, dt, dv, dcond, draw, tmp []float32
}

// NewLearner builds a learner for class prompts tokens [C, ctx] (each row
// "X X … X {class}." with NCtx placeholders).
func NewLearner(m *clip.Model, tokens []int, cfg Config) (*Learner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	own, err := prompt.NewEncoder(m, tokens, cfg.NCtx)
	if err != nil {
		return nil, fmt.Errorf("adapt: %w", err)
	}
	rep := func(k int) []int {
		out := make([]int, 0, k*len(tokens))
		for i := 0; i < k; i++ {
			out = append(out, tokens...)
		}
		return out
	}
	l := &Learner{Cfg: cfg, LogitScale: m.W.LogitScale, own: own, C: own.R, E: own.E, Dt: own.D, Dv: m.Vision.Cfg.Width}
	if l.all, err = prompt.NewEncoder(m, rep(cfg.Domains), cfg.NCtx); err != nil {
		return nil, fmt.Errorf("adapt: %w", err)
	}
	if cfg.Domains > 1 {
		if l.rest, err = prompt.NewEncoder(m, rep(cfg.Domains-1), cfg.NCtx); err != nil {
			return nil, fmt.Errorf("adapt: %w", err)
		}
	}
	if l.pv, err = clip.NewPromptedVision(m, cfg.Domains); err != nil {
		return nil, fmt.Errorf("adapt: %w", err)
	}
	return l, nil
}

// check verifies that P holds every parameter with its shape.
func (l *Learner) check(P tensor.Named) error {
	want := InitParams(Config{Domains: l.Cfg.Domains, NCtx: l.Cfg.NCtx, AdaLN: l.Cfg.AdaLN, AdaLNLayers: l.Cfg.AdaLNLayers}, l.Dt, l.Dv, l.E)
	for name, t := range want {
		p, ok := P[name]
		if !ok || !tensor.SameShape(p.Shape, t.Shape) {
			return fmt.Errorf("adapt: parameters lack %q of shape %v", name, t.Shape)
		}
	}
	return nil
}

// TextFeatures returns the normalised class text features of every domain,
// [n, C, E] (inference; owned by the learner until the next call).
func (l *Learner) TextFeatures(P tensor.Named) ([]float32, error) {
	if err := l.check(P); err != nil {
		return nil, err
	}
	n, D := l.Cfg.Domains, l.Cfg.NCtx*l.Dt
	l.ctx = nn.Grow(l.ctx, n*D)
	for i := 0; i < n; i++ {
		copy(l.ctx[i*D:(i+1)*D], P[TextName(i)].Data)
	}
	f, err := l.all.Forward(l.ctx[:n*D], n, false)
	if err != nil {
		return nil, fmt.Errorf("adapt: %w", err)
	}
	l.u = append(l.u[:0], f...)
	l.unorm = clip.NormalizeRows(l.unorm, l.u, n*l.C, l.E)
	return l.u, nil
}

// forward runs the image side and the head on cached prefixes x0
// [B, T, Dv] with normalised text features u [n, C, E] (l.u); it returns the
// logits [B, C].
func (l *Learner) forward(P tensor.Named, x0 []float32, B int, train bool) ([]float32, error) {
	n, C, E, D := l.Cfg.Domains, l.C, l.E, l.Dv
	l.B = B
	var err error
	if l.feat, l.q, l.k, err = l.pv.Forward(x0, P[ParamVisual].Data, B, train); err != nil {
		return nil, fmt.Errorf("adapt: %w", err)
	}
	grow := nn.Grow
	l.a, l.w = grow(l.a, B*n), grow(l.w, B*n)
	l.qn, l.kn, l.qnorm, l.knorm = grow(l.qn, B*D), grow(l.kn, B*n*D), grow(l.qnorm, B), grow(l.knorm, B*n)
	scoresForward(l.a, l.qn, l.kn, l.qnorm, l.knorm, l.q, l.k, B, n, D, float32(l.Cfg.Tau))
	softmaxForward(l.w, l.a, B, n)
	l.mix = grow(l.mix, B*C*E)
	mixForward(l.mix, l.w, l.u, B, n, C, E)
	l.txt = l.mix
	if l.Cfg.AdaLN {
		l.cond = grow(l.cond, B*E)
		copy(l.cond, l.feat[:B*E])
		l.condNorm = clip.NormalizeRows(l.condNorm, l.cond, B, E)
		W, b := l.adaLNParams(P)
		l.txt = l.ada.forward(l.mix, l.cond, W, b, B, C, E)
	}
	l.vn, l.tn, l.vnorm, l.tnorm = grow(l.vn, B*E), grow(l.tn, B*C*E), grow(l.vnorm, B), grow(l.tnorm, B*C)
	l.logits = grow(l.logits, B*C)
	cosineForward(l.logits, l.vn, l.tn, l.vnorm, l.tnorm, l.feat, l.txt, B, C, E, float32(math.Exp(float64(l.LogitScale))))
	return l.logits, nil
}

func (l *Learner) adaLNParams(P tensor.Named) ([][]float32, [][]float32) {
	var W, b [][]float32
	for i := 0; i < l.Cfg.AdaLNLayers; i++ {
		wn, bn := adaLNNames(i)
		W, b = append(W, P[wn].Data), append(b, P[bn].Data)
	}
	return W, b
}

// Logits scores cached prefixes x0 [B, T, Dv] against the classes with the
// text features of the last TextFeatures call: [B, C] (owned by the
// learner). It also returns the domain weights [B, n].
func (l *Learner) Logits(P tensor.Named, x0 []float32, B int) ([]float32, []float32, error) {
	if len(l.u) != l.Cfg.Domains*l.C*l.E {
		return nil, nil, fmt.Errorf("adapt: Logits before TextFeatures")
	}
	lg, err := l.forward(P, x0, B, false)
	return lg, l.w, err
}

// Step computes ADAPT's loss on B = len(labels) cached prefixes x0
// [B, T, Dv] of domain own (0 ≤ own < n) and writes the gradients of every
// trained parameter into G (overwritten): the own text prompt, the visual
// prompts and AdaLN. The other domains' prompts in P are constants. It
// returns the loss, its terms ("loss_ce", "loss_dom") and the number of
// correctly classified examples.
//
//	loss = CE(s·cos(f_V, f_T), y) + λ · CE(a, own)
func (l *Learner) Step(P, G tensor.Named, x0 []float32, labels []int, own int) (float64, map[string]float64, int, error) {
	B := len(labels)
	if err := l.checkStep(P, G, labels, own); err != nil {
		return 0, nil, 0, err
	}
	if err := l.textForward(P, own); err != nil {
		return 0, nil, 0, err
	}
	logits, err := l.forward(P, x0, B, true)
	if err != nil {
		return 0, nil, 0, err
	}
	ce, dce, correct := l.losses(logits, labels, own)
	l.headBackward(P, G, B)
	l.ownTextBackward(G, own)
	loss := ce + float64(float32(l.Cfg.Lambda))*dce
	return loss, map[string]float64{"loss_ce": ce, "loss_dom": dce}, correct, nil
}

// checkStep refuses an empty batch, a domain outside 0..n−1, parameters or
// gradients without every tensor at its shape, and labels outside 0..C−1.
func (l *Learner) checkStep(P, G tensor.Named, labels []int, own int) error {
	n, C := l.Cfg.Domains, l.C
	if len(labels) == 0 {
		return fmt.Errorf("adapt: empty batch")
	}
	if own < 0 || own >= n {
		return fmt.Errorf("adapt: domain %d outside 0..%d", own, n-1)
	}
	if err := l.check(P); err != nil {
		return err
	}
	if err := l.check(G); err != nil {
		return fmt.Errorf("gradients: %w", err)
	}
	for i, y := range labels {
		if y < 0 || y >= C {
			return fmt.Errorf("adapt: label %d of sample %d outside 0..%d", y, i, C-1)
		}
	}
	return nil
}

// textForward encodes the own prompt (kept for backward) and the others
// (constants) into l.raw [n, C, E], and their unit rows into l.u.
func (l *Learner) textForward(P tensor.Named, own int) error {
	n, C, E := l.Cfg.Domains, l.C, l.E
	fOwn, err := l.own.Forward(P[TextName(own)].Data, 1, true)
	if err != nil {
		return fmt.Errorf("adapt: %w", err)
	}
	l.raw = nn.Grow(l.raw, n*C*E)
	copy(l.raw[own*C*E:(own+1)*C*E], fOwn)
	if n > 1 {
		D := l.Cfg.NCtx * l.Dt
		l.ctx = nn.Grow(l.ctx, (n-1)*D)
		for i, j := 0, 0; i < n; i++ {
			if i != own {
				copy(l.ctx[j*D:(j+1)*D], P[TextName(i)].Data)
				j++
			}
		}
		f, err := l.rest.Forward(l.ctx[:(n-1)*D], n-1, false)
		if err != nil {
			return fmt.Errorf("adapt: %w", err)
		}
		for i, j := 0, 0; i < n; i++ {
			if i != own {
				copy(l.raw[i*C*E:(i+1)*C*E], f[j*C*E:(j+1)*C*E])
				j++
			}
		}
	}
	l.u = append(l.u[:0], l.raw...)
	l.unorm = clip.NormalizeRows(l.unorm, l.u, n*C, E)
	return nil
}

// losses is the classification CE on logits [B, C] (its gradient in l.dl)
// and the domain CE of the scores l.a [B, n] against own (its gradient,
// times λ, in l.da), and the number of correctly classified examples.
func (l *Learner) losses(logits []float32, labels []int, own int) (ce, dce float64, correct int) {
	n, C, B := l.Cfg.Domains, l.C, len(labels)
	l.dl, l.da = nn.Grow(l.dl, B*C), nn.Grow(l.da, B*n)
	ce = clip.CrossEntropy(logits, labels, B, C, l.dl)
	dom := make([]int, B)
	for i := range dom {
		dom[i] = own
	}
	lam := float32(l.Cfg.Lambda)
	dce = clip.CrossEntropy(l.a, dom, B, n, l.da)
	for i := range l.da {
		l.da[i] *= lam
	}
	for b, y := range labels {
		if eval.Argmax(logits[b*C:(b+1)*C]) == y {
			correct++
		}
	}
	return ce, dce, correct
}

// headBackward runs the head backward from l.dl and l.da: cosine head →
// (AdaLN) → mix → weights and scores → visual prompts (into G, overwritten);
// the text features' gradient is left in l.du [n, C, E].
func (l *Learner) headBackward(P, G tensor.Named, B int) {
	n, C, E := l.Cfg.Domains, l.C, l.E
	s := float32(math.Exp(float64(l.LogitScale)))
	l.dv, l.dt = zeroed(l.dv, B*E), zeroed(l.dt, B*C*E)
	l.tmp = cosineBackward(l.dv, l.dt, l.dl, l.vn, l.tn, l.vnorm, l.tnorm, B, C, E, s, l.tmp)
	dm := l.dt
	if l.Cfg.AdaLN {
		dm = l.adaLNBackward(P, G, B)
	}
	l.dw, l.du = zeroed(l.dw, B*n), zeroed(l.du, n*C*E)
	mixBackward(l.dw, l.du, dm, l.w, l.u, B, n, C, E)
	softmaxBackward(l.da, l.dw, l.w, B, n)
	l.dq, l.dk = zeroed(l.dq, B*l.Dv), zeroed(l.dk, B*n*l.Dv)
	l.tmp = scoresBackward(l.dq, l.dk, l.da, l.qn, l.kn, l.qnorm, l.knorm, B, n, l.Dv, float32(l.Cfg.Tau), l.tmp)
	copy(G[ParamVisual].Data, l.pv.Backward(l.dv, l.dq, l.dk))
}

// adaLNBackward runs AdaLN backward from l.dt [B, C, E]: its parameters'
// gradients into G (overwritten), its condition v̂ = f_V/‖f_V‖ into l.dv
// (+=); it returns the gradient at the mix, l.dm [B, C, E].
func (l *Learner) adaLNBackward(P, G tensor.Named, B int) []float32 {
	C, E := l.C, l.E
	W, _ := l.adaLNParams(P)
	dW, db := l.adaLNParams(G)
	for i := range dW {
		clear(dW[i])
		clear(db[i])
	}
	l.dm, l.dcond = zeroed(l.dm, B*C*E), zeroed(l.dcond, B*E)
	l.ada.backward(l.dm, l.dcond, l.dt, W, dW, db)
	// v̂ = f_V/‖f_V‖
	l.tmp = nn.Grow(l.tmp, E)
	for b := 0; b < B; b++ {
		clip.NormBackward(l.tmp[:E], l.dcond[b*E:(b+1)*E], l.cond[b*E:(b+1)*E], l.condNorm[b:b+1], 1, E)
		for j, v := range l.tmp[:E] {
			l.dv[b*E+j] += v
		}
	}
	return l.dm
}

// ownTextBackward takes the own text features' gradient (u = raw/‖raw‖)
// through the own prompt's encoder into G; the other prompts' gradients
// are zero.
func (l *Learner) ownTextBackward(G tensor.Named, own int) {
	n, C, E := l.Cfg.Domains, l.C, l.E
	l.draw = nn.Grow(l.draw, C*E)
	off := own * C * E
	clip.NormBackward(l.draw, l.du[off:off+C*E], l.u[off:off+C*E], l.unorm[own*C:(own+1)*C], C, E)
	for i := 0; i < n; i++ {
		clear(G[TextName(i)].Data)
	}
	copy(G[TextName(own)].Data, l.own.Backward(l.draw))
}

func zeroed(buf []float32, n int) []float32 {
	buf = nn.Grow(buf, n)
	clear(buf)
	return buf
}

// fillNormal draws x ~ N(0, std²) from PCG(seed, stream).
func fillNormal(x []float32, std float64, seed, stream uint64) {
	rng := rand.New(rand.NewPCG(seed, stream))
	for i := range x {
		x[i] = float32(rng.NormFloat64() * std)
	}
}
