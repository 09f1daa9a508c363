package pfedmma

import (
	"fmt"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/nn"
)

// Learner trains one client's adapters on a frozen CLIP. It runs only the
// adapted part of both encoders: blocks ℓ..L on cached prefixes (the output
// of blocks 1..ℓ−1, computed once per image and once per class prompt), with
// the last block pruned to the pooled token.
//
// A Learner is not safe for concurrent use. Several learners (clients) may
// share one *clip.Model as long as they run one at a time: Attach installs
// a learner's adapters into the model's blocks before it runs.
type Learner struct {
	Model    *clip.Model
	Adapters *Adapters
	// Split says the image records are split records (clip.SplitRecords):
	// block ℓ's adapter input ln_1(x) and frozen output per image, instead
	// of the prefix x. The class prompts' block ℓ then also runs once per
	// SetClassPrefix, and a step runs only block ℓ's adapter and blocks
	// ℓ+1..L. Only for 1 ≤ ℓ < L (see CanSplit).
	Split bool

	vis, txt map[int]*Branch // adapter branches by block index (0 = embeddings)

	// class prompts
	numClasses int
	eot        []int
	textPrefix []float32 // [C, textT, Dt]
	textT      int       // prompt length actually run (≤ Ctx)

	txtFeat, imgFeat, dTxt, dImg, dx0v, dx0t []float32

	// split mode: block ℓ's adapter input and frozen output of the class
	// prompts [C, textT, Dt] and of the image batch [B, T, Dv], the block
	// outputs with the adapter added, and the gradients there
	textH, textF, imgH, imgF, txtX, dTxtX, dImgF []float32
}

// CanSplit reports whether adapters starting at block start of a model with
// layers blocks can run on split records: block start must be a full block
// (1 ≤ start < layers; the last block is pruned to the pooled token).
func CanSplit(start, layers int) bool { return start >= 1 && start < layers }

// NewLearner binds adapters to a model. It checks the adapter widths and
// block range against the model. Learners that run one at a time may share
// a workspace for their activations; nil gives the learner its own.
func NewLearner(m *clip.Model, a *Adapters, ws *Workspace) (*Learner, error) {
	c := m.W.Config
	if a.Dv != c.Vision.Width || a.Dt != c.Text.Width {
		return nil, fmt.Errorf("mma: adapters built for widths %d/%d, model has %d/%d", a.Dv, a.Dt, c.Vision.Width, c.Text.Width)
	}
	L := min(c.Vision.Layers, c.Text.Layers)
	if err := a.Cfg.Validate(L); err != nil {
		return nil, err
	}
	if ws == nil {
		ws = NewWorkspace()
	}
	l := &Learner{Model: m, Adapters: a, vis: map[int]*Branch{}, txt: map[int]*Branch{}}
	for j := a.Cfg.Start; j <= a.Cfg.End; j++ {
		l.vis[j] = a.Branch("visual", j, ws)
		l.txt[j] = a.Branch("text", j, ws)
	}
	return l, nil
}

// Attach installs this learner's adapters into the model (and removes any
// other adapters). Call it before running a learner on a shared model.
func (l *Learner) Attach() {
	v, t := l.Model.Vision, l.Model.Text
	v.EmbedAdapter, t.EmbedAdapter = nil, nil
	for _, b := range v.Stack.Blocks {
		b.Adapter, b.QKV = nil, nil
	}
	for _, b := range t.Stack.Blocks {
		b.Adapter, b.QKV = nil, nil
	}
	for j, br := range l.vis {
		if j == 0 {
			v.EmbedAdapter = br
		} else {
			v.Stack.Blocks[j-1].Adapter = br
		}
	}
	for j, br := range l.txt {
		if j == 0 {
			t.EmbedAdapter = br
		} else {
			t.Stack.Blocks[j-1].Adapter = br
		}
	}
}

// firstBlock is the 0-based index of the first block that must run per step.
func (l *Learner) firstBlock() int { return max(l.Adapters.Cfg.Start-1, 0) }

// SetClasses fixes the class prompts (tokenised, [C, Ctx]) whose text
// features form the classifier. Their prefix is computed once here.
func (l *Learner) SetClasses(tokens []int, C int) error {
	p, err := clip.TextPrefix(l.Model, l.Adapters.Cfg.Start, tokens, C)
	if err != nil {
		return err
	}
	l.SetClassPrefix(p, clip.EOTPositions(tokens, C, l.Model.Text.Cfg.ContextLength), C)
	return nil
}

// SetClassPrefix installs an already computed class-prompt prefix
// [C, Ctx, Dt] (shared between clients with the same classes) and the EOT
// positions. When ℓ ≥ 1 the prompts are cut after the last EOT (see
// TruncatePrefix), which is exact under the causal mask.
func (l *Learner) SetClassPrefix(prefix []float32, eot []int, C int) {
	t := l.Model.Text
	l.eot, l.numClasses, l.textT = eot, C, t.Cfg.ContextLength
	l.textPrefix = prefix
	if l.Adapters.Cfg.Start >= 1 {
		l.textPrefix, l.textT = clip.TruncatePrefix(prefix, eot, C, t.Cfg.ContextLength, t.Cfg.Width)
	}
	if l.Split {
		// block ℓ of the class prompts, once: its adapter input and frozen
		// output
		n := C * l.textT * t.Cfg.Width
		l.textH, l.textF = nn.Grow(l.textH, n), nn.Grow(l.textF, n)
		t.Stack.FrozenBlock(l.textH, l.textF, l.textPrefix, C, l.textT, l.Adapters.Cfg.Start-1)
	}
}

// TextFeatures runs the adapted text blocks on the class prompts and returns
// their raw features [C, E] (owned by the learner).
func (l *Learner) TextFeatures(train bool) []float32 {
	t, C := l.Model.Text, l.numClasses
	x := l.textPrefix
	from := l.firstBlock()
	switch {
	case l.Split:
		// block ℓ's output: its frozen output plus the adapter
		start := l.Adapters.Cfg.Start
		n := C * l.textT * t.Cfg.Width
		l.txtX = nn.Grow(l.txtX, n)
		copy(l.txtX, l.textF[:n])
		l.txt[start].Forward(l.txtX, l.textH, C*l.textT)
		x, from = l.txtX, start
	case l.Adapters.Cfg.Start == 0:
		x = t.EmbedForward(l.textPrefix, C)
	}
	pooled := t.Stack.Forward(x, C, l.textT, from, len(t.Stack.Blocks), l.eot, train)
	l.txtFeat = nn.Grow(l.txtFeat, C*l.Model.W.Config.EmbedDim)
	t.HeadForward(l.txtFeat, pooled, C)
	return l.txtFeat
}

// ImageFeatures runs the adapted image blocks on prefixes [B, T, Dv] (split
// records [B, 2, T, Dv] when Split) and returns raw features [B, E] (owned
// by the learner).
func (l *Learner) ImageFeatures(prefix []float32, B int, train bool) []float32 {
	v := l.Model.Vision
	x := prefix
	from := l.firstBlock()
	switch {
	case l.Split:
		// block ℓ's output: its frozen output plus the adapter
		start := l.Adapters.Cfg.Start
		l.imgH, l.imgF = clip.Unsplit(prefix, B, v.Cfg.Tokens(), v.Cfg.Width, l.imgH, l.imgF)
		l.vis[start].Forward(l.imgF, l.imgH, B*v.Cfg.Tokens())
		x, from = l.imgF, start
	case l.Adapters.Cfg.Start == 0:
		x = v.AdaptEmbed(prefix, B)
	}
	pooled := v.Stack.Forward(x, B, v.Cfg.Tokens(), from, len(v.Stack.Blocks), clip.ClassPool(B), train)
	l.imgFeat = nn.Grow(l.imgFeat, B*l.Model.W.Config.EmbedDim)
	v.HeadForward(l.imgFeat, pooled, B)
	return l.imgFeat
}

// Step computes the mean cross-entropy of the batch (image prefixes
// [B, T, Dv], labels [B]) against all classes and accumulates the adapters'
// gradients (the caller zeroes them and applies the optimizer). It returns
// the loss and the logits [B, C].
func (l *Learner) Step(prefix []float32, B int, labels []int) (float64, []float32, error) {
	C, E := l.numClasses, l.Model.W.Config.EmbedDim
	for i, y := range labels[:B] {
		if y < 0 || y >= C {
			return 0, nil, fmt.Errorf("mma: label %d of sample %d outside 0..%d", y, i, C-1)
		}
	}
	txt := l.TextFeatures(true)
	img := l.ImageFeatures(prefix, B, true)
	l.dImg, l.dTxt = nn.Grow(l.dImg, B*E), nn.Grow(l.dTxt, C*E)
	loss, logits := CrossEntropyCos(img, txt, B, C, E, l.Model.W.LogitScale, labels, l.dImg, l.dTxt)

	v, t := l.Model.Vision, l.Model.Text
	dpool := v.HeadBackward(l.dImg)
	if l.Split {
		l.splitBackward(dpool, B)
		return loss, logits, nil
	}
	if l.Adapters.Cfg.Start == 0 {
		l.dx0v = nn.Grow(l.dx0v, B*v.Cfg.Tokens()*v.Cfg.Width)
		clear(l.dx0v)
		v.Stack.Backward(l.dx0v, dpool)
		v.AdaptEmbedBackward(nil, l.dx0v)
	} else {
		v.Stack.Backward(nil, dpool)
	}
	dpool = t.HeadBackward(l.dTxt)
	if l.Adapters.Cfg.Start == 0 {
		l.dx0t = nn.Grow(l.dx0t, C*t.Cfg.ContextLength*t.Cfg.Width)
		clear(l.dx0t)
		t.Stack.Backward(l.dx0t, dpool)
		t.EmbedBackward(l.dx0t)
	} else {
		t.Stack.Backward(nil, dpool)
	}
	return loss, logits, nil
}

// splitBackward is Step's backward pass in split mode: blocks ℓ+1..L give
// the gradient at block ℓ's output, which only block ℓ's adapter needs
// (the frozen block below has no parameter). dpool is the image tower's
// head gradient.
func (l *Learner) splitBackward(dpool []float32, B int) {
	v, t := l.Model.Vision, l.Model.Text
	start := l.Adapters.Cfg.Start
	N := B * v.Cfg.Tokens()
	l.dImgF = nn.Grow(l.dImgF, N*v.Cfg.Width)
	clear(l.dImgF)
	v.Stack.Backward(l.dImgF, dpool)
	l.vis[start].Backward(nil, l.dImgF, N)

	dpool = t.HeadBackward(l.dTxt)
	N = l.numClasses * l.textT
	l.dTxtX = nn.Grow(l.dTxtX, N*t.Cfg.Width)
	clear(l.dTxtX)
	t.Stack.Backward(l.dTxtX, dpool)
	l.txt[start].Backward(nil, l.dTxtX, N)
}

// Logits returns exp(logitScale)·cos for image prefixes [B, T, Dv] against
// text features txt [C, E] computed by TextFeatures(false) (inference).
func (l *Learner) Logits(prefix []float32, B int, txt []float32) []float32 {
	img := l.ImageFeatures(prefix, B, false)
	E := l.Model.W.Config.EmbedDim
	return clip.Logits(img, txt, B, l.numClasses, E, l.Model.W.LogitScale)
}

// CrossEntropyCos computes logits = exp(logitScale)·cos(img_i, txt_c)
// [B, C] from raw features img [B, E] and txt [C, E], the mean cross-entropy
// against labels, and writes the gradients of the loss with respect to the
// raw features into dImg [B, E] and dTxt [C, E] (overwritten).
func CrossEntropyCos(img, txt []float32, B, C, E int, logitScale float32, labels []int, dImg, dTxt []float32) (float64, []float32) {
	var head clip.CosineLogits
	logits := append([]float32(nil), head.Forward(img, txt, B, C, E, logitScale)...)
	dl := make([]float32, B*C)
	loss := clip.CrossEntropy(logits, labels, B, C, dl)
	head.Backward(dl, dImg, dTxt)
	return loss, logits
}
