package pfedmma

import (
	"context"
	"fmt"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/client"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/protocol"
)

// evalGroup evaluates a simulation's pFedMMA clients together
// (federation.GroupEval). The adapter of the first adapted block ℓ is a
// branch parallel to the whole block: block ℓ's output on a cached prefix x
// is frozen(x) + α·A_c(ln_1(x)), and neither frozen(x) nor ln_1(x) depends
// on the client. So for each batch of test prefixes the group runs block ℓ
// once without adapter (keeping ln_1(x), the adapters' input), and each
// client only adds its own branch and runs blocks ℓ+1..L: with ℓ = L (the
// last block, pruned to the class token) a client's whole image side is its
// adapter and the head. The frozen block ℓ runs in the model's precision
// (bfloat16 under engine.precision bf16). Every operation a client's scores
// go through is the one its own Evaluate runs, on the same batches, so the
// scores are bit-identical.
type evalGroup struct {
	env *methods.Env
	// start is ℓ ≥ 1, the first adapted block (1-based).
	start int
	// frozen is block ℓ's output without adapter [rows, Dv] and h its
	// adapters' input ln_1(x) [rows, Dv] for the current batch; x is the
	// client's copy of frozen with its branch added.
	frozen, h, x []float32
	rows, B      int
}

// capture is an adapter that adds nothing and keeps its input: installed in
// block ℓ while the group runs it, it records ln_1(x) for the clients.
type capture struct{ g *evalGroup }

func (c capture) Forward(_, h []float32, N int) {
	n := N * c.g.env.Model.Vision.Cfg.Width
	c.g.h = nn.Grow(c.g.h, n)
	copy(c.g.h, h[:n])
	c.g.rows = N
}

func (capture) Backward(_, _ []float32, _ int) {}

// pool returns the pooled positions of block ℓ when it is the last block
// (pruned to the class token), else nil.
func (g *evalGroup) pool(B int) []int {
	if g.start == len(g.env.Model.Vision.Stack.Blocks) {
		return clip.ClassPool(B)
	}
	return nil
}

// prepare runs the frozen block ℓ on a batch of test prefixes [B, T, Dv],
// or reads its output from split records [B, 2, T, Dv].
func (g *evalGroup) prepare(prefix []float32, B int) error {
	v := g.env.Model.Vision
	if g.env.Split() {
		T := v.Cfg.Tokens()
		g.h, g.frozen = clip.Unsplit(prefix, B, T, v.Cfg.Width, g.h, g.frozen)
		g.rows, g.B = B*T, B
		return nil
	}
	methods.DetachAll(g.env.Model)
	blk := v.Stack.Blocks[g.start-1]
	blk.Adapter = capture{g}
	out := v.Stack.Forward(prefix, B, v.Cfg.Tokens(), g.start-1, g.start, g.pool(B), false)
	blk.Adapter = nil
	g.B = B
	g.frozen = nn.Grow(g.frozen, g.rows*v.Cfg.Width)
	copy(g.frozen, out)
	return nil
}

// imageFeatures is Learner.ImageFeatures for the batch prepare ran on:
// client l's branch on block ℓ's shared frozen output, then its blocks
// ℓ+1..L and the head.
func (g *evalGroup) imageFeatures(l *Learner, B int) ([]float32, error) {
	if B != g.B {
		return nil, fmt.Errorf("pfedmma group evaluation: batch of %d images, block %d ran on %d", B, g.start, g.B)
	}
	v := l.Model.Vision
	D := v.Cfg.Width
	g.x = nn.Grow(g.x, g.rows*D)
	copy(g.x, g.frozen[:g.rows*D])
	l.vis[g.start].Forward(g.x, g.h, g.rows)
	pooled := g.x
	if L := len(v.Stack.Blocks); g.start < L {
		pooled = v.Stack.Forward(g.x, B, v.Cfg.Tokens(), g.start, L, clip.ClassPool(B), false)
	}
	l.imgFeat = nn.Grow(l.imgFeat, B*l.Model.W.Config.EmbedDim)
	v.HeadForward(l.imgFeat, pooled, B)
	return l.imgFeat, nil
}

// groupScorer is one client's scorer inside a group evaluation.
type groupScorer struct {
	s *site
	g *evalGroup
}

// Logits implements eval.Scorer as the client's CosineScorer does.
func (gs groupScorer) Logits(space int, _ []float32, B int) ([]float32, error) {
	s := gs.s
	txt, err := s.textFeatures(space)
	if err != nil {
		return nil, err
	}
	txt = append([]float32(nil), txt...)
	s.learner.Attach()
	img, err := gs.g.imageFeatures(s.learner, B)
	if err != nil {
		return nil, err
	}
	E := s.env.Model.W.Config.EmbedDim
	return clip.Logits(img, txt, B, len(txt)/E, E, s.env.Model.W.LogitScale), nil
}

// EvaluateGroup implements federation.GroupEval.
func (g *evalGroup) EvaluateGroup(ctx context.Context, clients []federation.Client, ins []federation.EvaluateIns) ([]federation.EvaluateRes, []error) {
	res := make([]federation.EvaluateRes, len(clients))
	errs := make([]error, len(clients))
	ss := make([]*site, len(clients))
	alone := false
	for i, fc := range clients {
		c, ok := fc.(*client.Client)
		if ok {
			ss[i], ok = c.Site.(*site)
		}
		if !ok || ss[i].group != g || len(ins[i].Params) > 0 {
			alone = true
		}
	}
	if alone {
		for i, fc := range clients {
			res[i], errs[i] = fc.Evaluate(ctx, ins[i])
		}
		return res, errs
	}
	scs := make([]eval.Scorer, len(ss))
	tasks := make([]*protocol.ClientTask, len(ss))
	for i, s := range ss {
		s.txt = map[int][]float32{}
		scs[i], tasks[i] = groupScorer{s, g}, s.c.Task
	}
	bar := methods.StepBar(ctx, 1, fmt.Sprintf("%d clients eval", len(ss)))
	defer bar.Finish()
	ms, err := g.env.EvaluateGroup(ctx, g.prepare, scs, tasks)
	for i, s := range ss {
		if err != nil {
			errs[i] = fmt.Errorf("client %d: %w", s.c.Task.ID, err)
			continue
		}
		res[i] = federation.EvaluateRes{Metrics: ms[i], NumExamples: len(s.c.Task.Train)}
	}
	return res, errs
}
