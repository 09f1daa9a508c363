package experiment

import (
	"context"
	"fmt"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/mma"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/progress"
	"github.com/pfedmma/pfedmma/tokenizer"
)

// Env is everything the methods share: the frozen model, the task, the
// prefixes of every training view and test image, and the class prompts.
type Env struct {
	Model    *clip.Model
	Tok      *tokenizer.Tokenizer
	Task     *Task
	Start    int // ℓ: the first block that runs per step (prefixes end before it)
	Template string

	Prefixer   *Prefixer
	TrainStore Store
	TestStore  Store
	// TrainRecs[i][v] is the record of view v of training item i (cached
	// modes); TestRecs[i] the record of test item i.
	TrainRecs map[int][]int
	TestRecs  map[int]int
	// Online recomputes augmented training prefixes every epoch.
	Online bool
	Seed   uint64

	spacePrefix map[int][]float32 // class-prompt prefix per label space
	spaceEOT    map[int][]int

	roundBar *progress.Bar // the running method's round bar, if any
	evalBuf  []float32     // prefix batch of evaluate
	// trainBuf and trainPx are the training batch's prefixes and pixels,
	// shared by the clients (they train one at a time).
	trainBuf, trainPx []float32
	// adapterWS holds the adapters' activations, shared by all clients.
	adapterWS *mma.Workspace
}

// stepBar starts a progress bar for one client's batches inside the current
// round (nil-safe: without a round bar it returns a quiet bar).
func (e *Env) stepBar(total int, desc string) *progress.Bar {
	if e.roundBar == nil {
		return progress.New(nil, total, desc, "img")
	}
	return e.roundBar.Child(total, desc, "img")
}

// Prompt returns the prompt of a class name.
func (e *Env) Prompt(class string) string {
	return strings.ReplaceAll(e.Template, "{}", strings.ReplaceAll(class, "_", " "))
}

// SpacePrompts computes (once) the text prefix and EOT positions of a label
// space's class prompts.
func (e *Env) SpacePrompts(space int) ([]float32, []int, error) {
	if p, ok := e.spacePrefix[space]; ok {
		return p, e.spaceEOT[space], nil
	}
	if e.spacePrefix == nil {
		e.spacePrefix, e.spaceEOT = map[int][]float32{}, map[int][]int{}
	}
	sp := e.Task.Spaces[space]
	ctx := e.Model.W.Config.Text.ContextLength
	var tokens []int
	for _, c := range sp.Classes {
		ids, err := e.Tok.Tokenize(e.Prompt(e.Task.Dataset.Classes[c]), ctx, false)
		if err != nil {
			return nil, nil, fmt.Errorf("class prompt: %w", err)
		}
		tokens = append(tokens, ids...)
	}
	// Blocks before ℓ never carry adapters, so the prefix is adapter-free
	// whatever learner is attached.
	p, err := mma.TextPrefix(e.Model, e.Start, tokens, len(sp.Classes))
	if err != nil {
		return nil, nil, err
	}
	e.spacePrefix[space] = p
	e.spaceEOT[space] = clip.EOTPositions(tokens, len(sp.Classes), ctx)
	return p, e.spaceEOT[space], nil
}

// detachAll removes every adapter from the model.
func detachAll(m *clip.Model) {
	m.Vision.EmbedAdapter, m.Text.EmbedAdapter = nil, nil
	for _, b := range m.Vision.Stack.Blocks {
		b.Adapter = nil
	}
	for _, b := range m.Text.Stack.Blocks {
		b.Adapter = nil
	}
}

// scorer produces features for evaluation.
type scorer interface {
	// textFeatures returns raw text features [C, E] of a label space.
	textFeatures(space int) ([]float32, error)
	// imageFeatures returns raw image features [B, E] of prefixes.
	imageFeatures(prefix []float32, B int) []float32
}

// evaluate scores sc on each evaluation set and returns accuracies in percent.
func (e *Env) evaluate(ctx context.Context, sc scorer, sets []*EvalSet) (map[string]float64, error) {
	out := map[string]float64{}
	E := e.Model.W.Config.EmbedDim
	n := e.Prefixer.RecordLen()
	const B = 64
	e.evalBuf = nn.Grow(e.evalBuf, B*n) // reused: one ViT-B/16 batch of prefixes is 39 MB
	buf := e.evalBuf
	for _, set := range sets {
		txt, err := sc.textFeatures(set.Space)
		if err != nil {
			return nil, err
		}
		txt = append([]float32(nil), txt...)
		C := len(e.Task.Spaces[set.Space].Classes)
		correct := 0
		recs := make([]int, 0, B)
		for s := 0; s < len(set.Images); s += B {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			hi := min(s+B, len(set.Images))
			recs = recs[:0]
			for _, i := range set.Images[s:hi] {
				recs = append(recs, e.TestRecs[i])
			}
			if err := e.TestStore.GetBatch(recs, buf[:len(recs)*n]); err != nil {
				return nil, err
			}
			img := sc.imageFeatures(buf[:len(recs)*n], len(recs))
			logits := clip.Logits(img, txt, len(recs), C, E, e.Model.W.LogitScale)
			for k := range recs {
				if argmax(logits[k*C:(k+1)*C]) == set.Labels[s+k] {
					correct++
				}
			}
		}
		if len(set.Images) > 0 {
			out[set.Name] = 100 * float64(correct) / float64(len(set.Images))
		}
	}
	if e.Task.Protocol == BaseToNovel {
		out["hm"] = hm(out["local"], out["base"], out["novel"])
	}
	return out, nil
}

func hm(vals ...float64) float64 {
	var s float64
	for _, v := range vals {
		if v <= 0 {
			return 0
		}
		s += 1 / v
	}
	return float64(len(vals)) / s
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// frozenScorer is zero-shot CLIP: the model without adapters, run from the
// cached prefixes (exactly the full encoders).
type frozenScorer struct {
	env      *Env
	txtCache map[int][]float32
	feat     []float32
}

func (z *frozenScorer) textFeatures(space int) ([]float32, error) {
	if f, ok := z.txtCache[space]; ok {
		return f, nil
	}
	p, eot, err := z.env.SpacePrompts(space)
	if err != nil {
		return nil, err
	}
	detachAll(z.env.Model)
	t := z.env.Model.Text
	C := len(eot)
	x, T := p, t.Cfg.ContextLength
	if z.env.Start == 0 {
		x = t.EmbedForward(p, C)
	} else {
		x, T = mma.TruncatePrefix(p, eot, C, T, t.Cfg.Width)
	}
	pooled := t.Stack.Forward(x, C, T, max(z.env.Start-1, 0), len(t.Stack.Blocks), eot, false)
	f := make([]float32, C*z.env.Model.W.Config.EmbedDim)
	t.HeadForward(f, pooled, C)
	if z.txtCache == nil {
		z.txtCache = map[int][]float32{}
	}
	z.txtCache[space] = f
	return f, nil
}

func (z *frozenScorer) imageFeatures(prefix []float32, B int) []float32 {
	detachAll(z.env.Model)
	v := z.env.Model.Vision
	pooled := v.Stack.Forward(prefix, B, v.Cfg.Tokens(), max(z.env.Start-1, 0), len(v.Stack.Blocks), clip.ClassPool(B), false)
	z.feat = nn.Grow(z.feat, B*z.env.Model.W.Config.EmbedDim)
	v.HeadForward(z.feat, pooled, B)
	return z.feat
}
