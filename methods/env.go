package methods

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/methods/prefixcache"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/tokenizer"
)

// Env is everything the methods of a run share: the frozen model, the task,
// the cached frozen prefixes of every training view and test image (the
// input of block Start), the class prompts and the local-training settings.
// It holds no client's state: each client loads its batches into its own
// Workspace, and the runner's hooks (progress, evaluation logits) come in
// the clients' contexts (Observer).
type Env struct {
	Model *clip.Model
	Tok   *tokenizer.Tokenizer
	Task  *protocol.Task
	// Start is ℓ, the first block that runs per step (prefixes end before
	// it), or Features / TokenFeatures when the image encoder is frozen.
	Start    int
	Template string
	Seed     uint64
	// Rounds is the run's number of federated rounds (federation.rounds;
	// session.Build sets it), 0 where unknown (fixtures): PromptSRC's
	// server-side aggregation over rounds weighs them.
	Rounds int
	// Train holds the local-training settings of the trained methods.
	Train train.Options
	// Views is the number of cached augmented views per training image
	// (0: the exact center crop); Online recomputes augmented prefixes
	// every epoch instead.
	Views  int
	Online bool

	Prefixer   *prefixcache.Prefixer
	TrainStore prefixcache.Store
	TestStore  prefixcache.Store
	// TrainRecs[i][v] is the record of view v of training item i (cached
	// modes); TestRecs[i] the record of test item i.
	TrainRecs map[int][]int
	TestRecs  map[int]int
	// Evaluator scores on the test store (batch: eval.batch_size).
	Evaluator *eval.Evaluator
	// Init, when set, replaces a method's seeded initial parameters (named
	// as in the reference code): fixtures and `pfedmma step`/`round`.
	Init tensor.Named
	// SpaceTokenRows, when set, gives the tokenised class prompts [C, ctx]
	// of a label space instead of the template and tokenizer.
	SpaceTokenRows map[int][]int

	spacePrefix map[int][]float32 // class-prompt prefix per label space
	spaceEOT    map[int][]int

	// shared holds objects clients of one method share (workspaces), by
	// key; see Shared.
	shared map[string]any
}

// ForMethod returns the env one method is built and trained on: e's
// frozen model, task, records and evaluator with the method's training
// options t, and caches of its own (class-prompt prefixes, the workspaces
// its clients share), so that building and training a method never writes
// e and the methods sharing e each keep their own options.
func (e *Env) ForMethod(t train.Options) *Env {
	c := *e
	c.Train = t
	c.spacePrefix, c.spaceEOT, c.shared = nil, nil, nil
	return &c
}

// Shared returns the object stored under key, making it with mk the first
// time: clients of a method share activation workspaces through it, so
// memory does not grow with the number of clients.
func (e *Env) Shared(key string, mk func() any) any {
	if e.shared == nil {
		e.shared = map[string]any{}
	}
	v, ok := e.shared[key]
	if !ok {
		v = mk()
		e.shared[key] = v
	}
	return v
}

// Prompt returns the prompt of a class name.
func (e *Env) Prompt(class string) string {
	return strings.ReplaceAll(e.Template, "{}", strings.ReplaceAll(class, "_", " "))
}

// SpaceTokens tokenises the class prompts of a label space: [C, ctx].
func (e *Env) SpaceTokens(space int) ([]int, error) {
	if rows, ok := e.SpaceTokenRows[space]; ok {
		return rows, nil
	}
	if err := e.checkSpace(space); err != nil {
		return nil, err
	}
	sp := e.Task.Spaces[space]
	ctx := e.Model.W.Config.Text.ContextLength
	var tokens []int
	for _, c := range sp.Classes {
		ids, err := e.Tok.Tokenize(e.Prompt(e.Task.Dataset.Classes[c]), ctx, false)
		if err != nil {
			return nil, fmt.Errorf("class prompt: %w", err)
		}
		tokens = append(tokens, ids...)
	}
	return tokens, nil
}

// checkSpace refuses a label-space index the task does not have.
func (e *Env) checkSpace(space int) error {
	if space < 0 || space >= len(e.Task.Spaces) {
		return fmt.Errorf("label space %d: the task has %d (0 to %d)", space, len(e.Task.Spaces), len(e.Task.Spaces)-1)
	}
	return nil
}

// ClassPromptTokens tokenises "<prefix> <class>." for every class of a
// label space ([C, ctx]): CoOp's learnable-prompt rows, whose prefix is
// n_ctx placeholder words ("X X … X") replaced by learned vectors.
func (e *Env) ClassPromptTokens(space int, prefix string) ([]int, error) {
	if rows, ok := e.SpaceTokenRows[space]; ok {
		return rows, nil
	}
	if err := e.checkSpace(space); err != nil {
		return nil, err
	}
	ctx := e.Model.W.Config.Text.ContextLength
	var tokens []int
	for _, c := range e.Task.Spaces[space].Classes {
		name := strings.ReplaceAll(e.Task.Dataset.Classes[c], "_", " ")
		ids, err := e.Tok.Tokenize(prefix+" "+name+".", ctx, false)
		if err != nil {
			// the prefix is the method's n_ctx placeholder words
			return nil, fmt.Errorf("n_ctx %d: the class prompt of %q does not fit the model's %d-token context (lower n_ctx): %w",
				len(strings.Fields(prefix)), name, ctx, err)
		}
		tokens = append(tokens, ids...)
	}
	return tokens, nil
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
	tokens, err := e.SpaceTokens(space)
	if err != nil {
		return nil, nil, err
	}
	C := len(e.Task.Spaces[space].Classes)
	// Blocks before ℓ never carry adapters, so the prefix is adapter-free
	// whatever learner is attached.
	p, err := clip.TextPrefix(e.Model, e.TextStart(), tokens, C)
	if err != nil {
		return nil, nil, err
	}
	e.spacePrefix[space] = p
	e.spaceEOT[space] = clip.EOTPositions(tokens, C, e.Model.W.Config.Text.ContextLength)
	return p, e.spaceEOT[space], nil
}

// Split reports whether the image records are split records
// (prefixcache.Prefixer.Split): [h | f] per image, block Start's branch input
// and its frozen output.
func (e *Env) Split() bool { return e.Prefixer != nil && e.Prefixer.Split }

// TextStart is the block the text side of Start's prefixes starts at: Start,
// or 1 (after the embeddings) when the image encoder is frozen whole.
func (e *Env) TextStart() int {
	if e.Start < 0 {
		return 1
	}
	return e.Start
}

// EvalSets returns a client's evaluation sets as records of the test store.
func (e *Env) EvalSets(c *protocol.ClientTask) []eval.Set {
	out := make([]eval.Set, len(c.Evals))
	for i, s := range c.Evals {
		recs := make([]int, len(s.Images))
		for k, img := range s.Images {
			recs[k] = e.TestRecs[img]
		}
		out[i] = eval.Set{Name: s.Name, Space: s.Space, Records: recs, Labels: s.Labels}
	}
	return out
}

// Evaluate scores sc on a client's evaluation sets (accuracies in percent,
// with hm under base-to-novel).
func (e *Env) Evaluate(ctx context.Context, sc eval.Scorer, c *protocol.ClientTask) (eval.Metrics, error) {
	sets := e.EvalSets(c)
	var rec *recordLogits
	onEvaluate := ObserverFrom(ctx).OnEvaluate
	if onEvaluate != nil {
		rec = &recordLogits{Scorer: sc, sets: sets, out: make([][]float32, len(sets))}
		rec.skipEmpty()
		sc = rec
	}
	m, err := e.Evaluator.Accuracy(ctx, sc, sets)
	if err != nil {
		return nil, err
	}
	if rec != nil {
		onEvaluate(c, rec.out)
	}
	if e.Task.Protocol == protocol.BaseToNovel {
		eval.WithHM(m)
	}
	return m, nil
}

// recordLogits is a Scorer that keeps the logits of each evaluation set:
// the Evaluator visits the sets in order, each in order of its records.
type recordLogits struct {
	eval.Scorer
	sets []eval.Set
	out  [][]float32
	cur  int // set being scored
	rows int // rows of it scored so far
}

func (r *recordLogits) skipEmpty() {
	for r.cur < len(r.sets) && r.rows == len(r.sets[r.cur].Records) {
		r.cur, r.rows = r.cur+1, 0
	}
}

func (r *recordLogits) Logits(space int, prefix []float32, B int) ([]float32, error) {
	l, err := r.Scorer.Logits(space, prefix, B)
	if err != nil || r.cur >= len(r.sets) {
		return l, err
	}
	r.out[r.cur] = append(r.out[r.cur], l...)
	r.rows += B
	r.skipEmpty()
	return l, nil
}

// Workspace is a client's training-batch buffers: the batch's records
// (Buf) and, in online mode, its augmented pixels (Px).
type Workspace struct {
	Buf, Px []float32
}

// Workspaces hands the clients of one method their batch buffers for the
// length of a training run, so that memory grows with the clients that
// train at once, not with the clients. The zero value is ready; a nil
// *Workspaces hands out fresh ones.
type Workspaces struct {
	mu   sync.Mutex
	free []*Workspace
}

// Get returns a free workspace, or a new one.
func (p *Workspaces) Get() *Workspace {
	if p == nil {
		return &Workspace{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		w := p.free[n-1]
		p.free = p.free[:n-1]
		return w
	}
	return &Workspace{}
}

// Put returns w for another client's use.
func (p *Workspaces) Put(w *Workspace) {
	if p == nil || w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = append(p.free, w)
}

// Free is the number of workspaces waiting for a client.
func (p *Workspaces) Free() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// LoadBatch loads the prefixes of a client's training examples batch
// (indices into c.Train) into w.Buf: from the cache, picking one of the
// cached views at random with rng, or recomputed from freshly augmented
// pixels in online mode (view round·1000 + epoch).
func (e *Env) LoadBatch(w *Workspace, c *protocol.ClientTask, batch []int, rng interface{ IntN(int) int }, round, epoch int) error {
	n := e.Prefixer.RecordLen()
	w.Buf = nn.Grow(w.Buf, len(batch)*n)
	if e.Online {
		return e.onlinePrefixes(w, c, batch, round, epoch)
	}
	recs := make([]int, 0, len(batch))
	for _, k := range batch {
		views := e.TrainRecs[c.Train[k]]
		v := 0
		if len(views) > 1 {
			v = rng.IntN(len(views))
		}
		recs = append(recs, views[v])
	}
	return e.TrainStore.GetBatch(recs, w.Buf[:len(batch)*n])
}

// onlinePrefixes recomputes the prefixes of a batch from freshly augmented
// pixels (the reference's per-epoch augmentation).
func (e *Env) onlinePrefixes(w *Workspace, c *protocol.ClientTask, batch []int, round, epoch int) error {
	S := e.Model.W.Config.Vision.ImageSize
	per := 3 * S * S
	w.Px = nn.Grow(w.Px, len(batch)*per)
	errs := make([]error, len(batch))
	nn.ParallelFor(len(batch), 1, func(lo, hi int) {
		for k := lo; k < hi; k++ {
			v := prefixcache.View{Item: c.Train[batch[k]], Index: round*1000 + epoch, Augment: true}
			errs[k] = e.Prefixer.Pixels(e.Task.Train, v, e.Seed, w.Px[k*per:(k+1)*per])
		}
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	w.Buf = e.Prefixer.Compute(w.Px, len(batch), w.Buf)
	return nil
}
