package bench

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/session"
	"github.com/pfedmma/pfedmma/tokenizer"
)

// MethodOptions configure the benchmark of one registered method's
// training step and evaluation through the production path (its client,
// the shared training loop, the cached records of its depth) at ViT-B/16
// shapes with random weights.
type MethodOptions struct {
	Method  string
	Batch   int // 32
	Classes int // 24
	Steps   int // timed epochs of one batch each (MinSteps when ≤ 0)
	// Precision of the frozen weights' products.
	Precision gemm.Precision
	Reference *Reference
	Log       func(string)
	// Model, when set, replaces the random ViT-B/16 (tests).
	Model *clip.Model
	// Uncached recomputes the batch's frozen records (the image encoder up
	// to the method's cache depth) before every timed step and evaluation,
	// as the authors' code runs it: like for like (uncached.go).
	Uncached bool
	// Vocab is CLIP's BPE vocabulary file (bpe_simple_vocab_16e6.txt.gz),
	// for a method that tokenises text itself (FedMVP's class
	// descriptions); empty: no tokenizer.
	Vocab string
}

// MethodResult is what `pfedmma bench train --method NAME --json` prints.
type MethodResult struct {
	CPU           gemm.CPUInfo `json:"cpu"`
	Method        string       `json:"method"`
	Backend       string       `json:"backend"`
	Core          string       `json:"kernel"`
	Threads       int          `json:"threads"`
	Precision     string       `json:"precision"`
	Batch         int          `json:"batch"`
	Classes       int          `json:"classes"`
	Depth         string       `json:"cached"`
	TrainPerS     float64      `json:"train_images_per_s"`
	TrainSpread   float64      `json:"train_spread"`
	EvalPerS      float64      `json:"eval_images_per_s"`
	EvalSpread    float64      `json:"eval_spread"`
	SpeedupTrain  float64      `json:"speedup_train,omitempty"`
	SpeedupEval   float64      `json:"speedup_eval,omitempty"`
	ReferenceTrn  float64      `json:"reference_train_images_per_s,omitempty"`
	ReferenceEval float64      `json:"reference_eval_images_per_s,omitempty"`
	ReferenceConf string       `json:"reference_config,omitempty"`
	// Recomputed names the frozen work redone every step with Uncached.
	Recomputed string `json:"recomputed,omitempty"`
}

// classRows makes C class prompts [C, ctx] as CoOp's learnable prompts
// tokenise them: SOT, 16 placeholder tokens, two class tokens, ".", EOT
// (the row maximum).
func classRows(C, ctx, vocab int) []int {
	rows := make([]int, C*ctx)
	for c := 0; c < C; c++ {
		r := rows[c*ctx : (c+1)*ctx]
		r[0] = vocab - 2
		i := 1
		for ; i <= 16 && i < ctx-4; i++ {
			r[i] = 343 % (vocab - 2)
		}
		r[i], r[i+1], r[i+2], r[i+3] = (400+2*c)%(vocab-2), (401+2*c)%(vocab-2), 269%(vocab-2), vocab-1
	}
	return rows
}

// Method benchmarks one method: the median time of one local epoch of one
// batch (Fit through the training loop) and of one evaluation of a batch.
func Method(ctx context.Context, o MethodOptions) (*MethodResult, error) {
	if o.Batch <= 0 {
		o.Batch = 32
	}
	if o.Classes <= 0 {
		o.Classes = 24
	}
	if o.Steps <= 0 {
		o.Steps = MinSteps
	}
	if o.Log == nil {
		o.Log = func(string) {}
	}
	b, err := newMethodBench(&o)
	if err != nil {
		return nil, err
	}
	env, px, err := b.env(o)
	if err != nil {
		return nil, err
	}
	defer env.TrainStore.Close()
	sess, err := session.Build(session.Config{Env: env, Method: b.meth, Settings: b.sec})
	if err != nil {
		return nil, err
	}
	if sess.Coordinator == nil {
		return nil, fmt.Errorf("%s does not train", o.Method)
	}
	if err := firstRound(ctx, sess.Plan, o.Batch); err != nil {
		return nil, err
	}
	tt, te, err := timeMethod(ctx, o, sess.Plan, frozenWork(o, env.Prefixer, px))
	if err != nil {
		return nil, err
	}
	res := &MethodResult{CPU: gemm.CPU(), Method: o.Method, Backend: gemm.Backend(), Core: gemm.CoreName(), Threads: gemm.Threads(),
		Precision: o.Precision.String(), Batch: o.Batch, Classes: o.Classes, Depth: b.depthName(),
		TrainPerS: float64(o.Batch) / tt.Median, TrainSpread: tt.Spread, EvalPerS: float64(o.Batch) / te.Median, EvalSpread: te.Spread}
	if o.Uncached {
		res.Depth, res.Recomputed = "none", res.Depth
	}
	if ref := o.Reference; ref != nil {
		res.ReferenceTrn, res.ReferenceEval, res.ReferenceConf = ref.TrainImagesPerS, ref.EvalImagesPerS, ref.Config
		res.SpeedupTrain, res.SpeedupEval = res.TrainPerS/ref.TrainImagesPerS, res.EvalPerS/ref.EvalImagesPerS
	}
	return res, nil
}

// methodBench is the method a Method benchmark runs: its settings (the
// defaults with its benchmark settings), the model at the asked precision,
// the depth of its frozen records and whether they are split.
type methodBench struct {
	meth  methods.Method
	sec   config.Section
	m     *clip.Model
	depth int
	split bool
}

// newMethodBench resolves o's method, settings and model (o.Precision
// auto becomes the precision chosen) and checks the reference's shapes.
func newMethodBench(o *MethodOptions) (*methodBench, error) {
	meth, err := methods.Get(o.Method)
	if err != nil {
		return nil, err
	}
	b := &methodBench{meth: meth, m: o.Model}
	if d := meth.DefaultConfig(); d != nil {
		b.sec = d
	}
	if bs, ok := meth.(methods.Benchmarked); ok && b.sec != nil {
		bs.BenchSettings(b.sec)
	}
	if b.m == nil {
		b.m = clip.New(clip.Random(clip.ViTB16(), 1))
	}
	if o.Precision == gemm.Auto {
		p := b.m.ChoosePrecision()
		o.Precision = p.Chosen
		o.Log("precision auto: " + p.String())
	}
	if err := b.m.SetPrecision(o.Precision); err != nil {
		return nil, err
	}
	L := b.m.W.Config.Vision.Layers
	if f, ok := b.sec.(config.ModelFitter); ok {
		for _, c := range f.FitModel(L) {
			o.Log(o.Method + "." + c)
		}
	}
	if b.depth, err = meth.Depth(b.sec, L); err != nil {
		return nil, err
	}
	if b.depth == methods.AnyDepth {
		return nil, fmt.Errorf("%s does not train", o.Method)
	}
	if o.Reference != nil {
		if err := o.Reference.Check(o.Method, o.Batch, o.Classes, b.m.W.Config.Vision.ImageSize); err != nil {
			return nil, err
		}
	}
	b.split, err = methods.SplitRecords(meth, b.sec, L)
	return b, err
}

// env builds the frozen env of two clients holding the same random batch
// (client 1 only takes part in round 0: it gives client 0 a pool entry, an
// expert for pFedMoAP), the batch also being client 0's evaluation set; it
// returns the env and the batch's pixels.
func (b *methodBench) env(o MethodOptions) (*methods.Env, []float32, error) {
	m := b.m
	S := m.W.Config.Vision.ImageSize
	r := rand.New(rand.NewPCG(3, 4))
	px := make([]float32, o.Batch*3*S*S)
	for i := range px {
		px[i] = float32(r.NormFloat64())
	}
	labels := make([]int, o.Batch)
	for i := range labels {
		labels[i] = i % o.Classes
	}
	o.Log(fmt.Sprintf("computing the cached records of %d images at depth %d", o.Batch, b.depth))
	opts := train.Options{Epochs: 1, Batch: o.Batch, Optimizer: "sgd", LR: 1e-3, Momentum: 0.9, WD: 5e-4}
	tc := parity.TensorClient{Pixels: px, Labels: labels}
	newEnv := parity.TensorEnv
	if b.split {
		newEnv = parity.SplitTensorEnv
	}
	env, err := newEnv(m, b.depth, classRows(o.Classes, m.W.Config.Text.ContextLength, m.W.Config.Text.VocabSize),
		o.Classes, []parity.TensorClient{tc, tc}, opts, 1)
	if err != nil {
		return nil, nil, err
	}
	if o.Vocab != "" {
		if env.Tok, err = tokenizer.Load(o.Vocab); err != nil {
			env.TrainStore.Close()
			return nil, nil, fmt.Errorf("--vocab: %w", err)
		}
	}
	task := &env.Task.Clients[0]
	env.Task.Test = env.Task.Train
	set := &protocol.EvalSet{Name: "acc", Space: 0, Labels: labels}
	for i, item := range task.Train {
		env.TestRecs[item] = env.TrainRecs[item][0]
		set.Images = append(set.Images, i)
	}
	task.Evals = []*protocol.EvalSet{set}
	return env, px, nil
}

// firstRound is round 0 with both clients, driven by hand: the strategy
// initialised, configured, both clients fitted and their results
// aggregated.
func firstRound(ctx context.Context, plan *methods.Plan, batch int) error {
	infos := []federation.ClientInfo{{ID: 0, NumExamples: batch}, {ID: 1, NumExamples: batch}}
	if err := plan.Strategy.Init(infos); err != nil {
		return err
	}
	in, err := plan.Strategy.Configure(0, []int{0, 1})
	if err != nil {
		return err
	}
	var results []federation.FitResult
	for id, cl := range plan.Clients {
		res, err := cl.Fit(ctx, federation.FitIns{Round: 0, Params: in[id]})
		if err != nil {
			return err
		}
		results = append(results, federation.FitResult{ClientID: id, NumExamples: res.NumExamples, Params: res.Params})
	}
	return plan.Strategy.Aggregate(0, results, nil)
}

// timeMethod times o.Steps training epochs of client 0 (each configured by
// the strategy from round 1 on) and o.Steps evaluations, each after the
// frozen work (none when cached).
func timeMethod(ctx context.Context, o MethodOptions, plan *methods.Plan, frozen func()) (train, eval Timing, err error) {
	c, round := plan.Clients[0], 1
	o.Log(fmt.Sprintf("timing %d training steps of batch %d", o.Steps, o.Batch))
	train, err = Measure(ctx, 1, o.Steps, func(int) error {
		frozen()
		in, err := plan.Strategy.Configure(round, []int{0})
		if err != nil {
			return err
		}
		_, err = c.Fit(ctx, federation.FitIns{Round: round, Params: in[0]})
		round++
		return err
	})
	if err != nil {
		return train, eval, err
	}
	o.Log(fmt.Sprintf("timing %d evaluations of batch %d", o.Steps, o.Batch))
	eval, err = Measure(ctx, 1, o.Steps, func(int) error {
		frozen()
		_, err := c.Evaluate(ctx, federation.EvaluateIns{Round: round})
		return err
	})
	return train, eval, err
}

// depthName says what the method's cached records are.
func (b *methodBench) depthName() string {
	switch b.depth {
	case methods.Features:
		return "image features"
	case methods.TokenFeatures:
		return "every token's features"
	case methods.Embeddings:
		return "patch embeddings and frozen features"
	}
	if b.split {
		return fmt.Sprintf("block %d's frozen output and adapter input", b.depth)
	}
	return fmt.Sprintf("prefix before block %d", b.depth)
}
