package bench

import (
	"bufio"
	"context"
	"image"
	"image/color"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/gemm"
	mma "github.com/pfedmma/pfedmma/methods/pfedmma"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/preprocess"
)

// TrainResult is what `pfedmma bench train` reports.
type TrainResult struct {
	CPU gemm.CPUInfo `json:"cpu"`
	// PrecisionAsked is the option (fp32, bf16 or auto); Precision the one
	// that ran, chosen by Probe's timing for auto.
	PrecisionAsked string      `json:"precision_asked"`
	Probe          *gemm.Probe `json:"precision_probe,omitempty"`
	Backend        string      `json:"backend"`
	Core           string      `json:"core"`
	BestCore       string      `json:"best_core"`
	Precision      string      `json:"precision"`
	Threads        int         `json:"threads"`
	Steps          int         `json:"steps"`
	Batch          int         `json:"batch"`
	Classes        int         `json:"classes"`
	Blocks         string      `json:"adapted_blocks"`
	Dim            int         `json:"adapter_dim"`
	// Split: the cache holds block ℓ's frozen output and adapter input
	// (pfedmma.cache_block_output), not the prefix before block ℓ.
	Split           bool    `json:"cache_block_output"`
	TrainCachedPerS float64 `json:"train_images_per_s_cached"`
	EvalCachedPerS  float64 `json:"eval_images_per_s_cached"`
	TrainOnlinePerS float64 `json:"train_images_per_s_online"`
	EvalOnlinePerS  float64 `json:"eval_images_per_s_online"`
	// *_spread: interquartile range of the step times over their median.
	TrainCachedSpread float64 `json:"train_cached_spread"`
	EvalCachedSpread  float64 `json:"eval_cached_spread"`
	TrainOnlineSpread float64 `json:"train_online_spread"`
	EvalOnlineSpread  float64 `json:"eval_online_spread"`
	PeakRSSMiB        float64 `json:"peak_rss_mib"`
	GemmGFLOPS        float64 `json:"gemm_gflops"` // achieved inside the counted GEMMs of a cached training step
	// Reference figures and speedups: only with TrainOptions.Reference.
	ReferenceTrainPerS float64 `json:"reference_train_images_per_s,omitempty"`
	ReferenceEvalPerS  float64 `json:"reference_eval_images_per_s,omitempty"`
	ReferenceRSSMiB    float64 `json:"reference_peak_rss_mib,omitempty"`
	ReferenceConfig    string  `json:"reference_config,omitempty"`
	SpeedupTrainCached float64 `json:"speedup_train_cached,omitempty"`
	SpeedupEvalCached  float64 `json:"speedup_eval_cached,omitempty"`
	SpeedupTrainOnline float64 `json:"speedup_train_online,omitempty"`
	SpeedupEvalOnline  float64 `json:"speedup_eval_online,omitempty"`
}

// TrainOptions size the training benchmark.
type TrainOptions struct {
	Batch   int // 32
	Classes int // 24
	Start   int // first adapted block (10)
	Dim     int // adapter width (32)
	Steps   int // timed steps per measurement (MinSteps when ≤ 0), after one warm-up step
	// NoSplit caches the prefix before block ℓ instead of split records
	// (block ℓ's frozen output and adapter input; pfedmma.cache_block_output).
	NoSplit bool
	// Precision of the frozen weights' products (FP32).
	Precision gemm.Precision
	// Reference, when set, gives the figures the speedups divide by.
	Reference *Reference
	Log       func(string)
}

// Train measures pFedMMA's local training and evaluation at ViT-B/16 shapes
// with random weights: cached mode runs blocks ℓ..L on stored prefixes;
// online mode also decodes-and-augments an image and runs the frozen prefix
// for every batch (the reference's per-epoch augmentation).
func Train(ctx context.Context, o TrainOptions) (*TrainResult, error) {
	if o.Batch <= 0 {
		o.Batch = 32
	}
	if o.Classes <= 0 {
		o.Classes = 24
	}
	if o.Start <= 0 {
		o.Start = 10
	}
	if o.Dim <= 0 {
		o.Dim = 32
	}
	if o.Steps <= 0 {
		o.Steps = MinSteps
	}
	t := &trainBench{ctx: ctx, o: o, cfg: clip.ViTB16(), B: o.Batch}
	t.m = clip.New(clip.Random(t.cfg, 1))
	asked := o.Precision
	var probe *gemm.Probe
	if o.Precision == gemm.Auto {
		p := t.m.ChoosePrecision()
		probe, t.o.Precision = &p, p.Chosen
		t.logf("precision auto: " + p.String())
	}
	if err := t.m.SetPrecision(t.o.Precision); err != nil {
		return nil, err
	}
	if err := t.setup(); err != nil {
		return nil, err
	}
	inUse, best := gemm.KernelFamily()
	res := &TrainResult{CPU: gemm.CPU(), Backend: gemm.Backend(), Core: inUse, BestCore: best, Precision: t.o.Precision.String(), PrecisionAsked: asked.String(), Probe: probe,
		Threads: gemm.Threads(), Steps: o.Steps, Batch: o.Batch, Classes: o.Classes,
		Blocks: strconv.Itoa(o.Start) + "-" + strconv.Itoa(t.cfg.Vision.Layers), Dim: o.Dim, Split: t.l.Split}
	if err := t.measure(res); err != nil {
		return nil, err
	}
	res.PeakRSSMiB = peakRSSMiB()
	if r := o.Reference; r != nil {
		res.ReferenceTrainPerS, res.ReferenceEvalPerS, res.ReferenceRSSMiB = r.TrainImagesPerS, r.EvalImagesPerS, r.PeakRSSMiB
		res.ReferenceConfig = r.Config
		res.SpeedupTrainCached = res.TrainCachedPerS / r.TrainImagesPerS
		res.SpeedupEvalCached = res.EvalCachedPerS / r.EvalImagesPerS
		res.SpeedupTrainOnline = res.TrainOnlinePerS / r.TrainImagesPerS
		res.SpeedupEvalOnline = res.EvalOnlinePerS / r.EvalImagesPerS
	}
	return res, nil
}

// trainBench is one Train benchmark: the random ViT-B/16, pFedMMA's
// adapters and learner on it, a batch's labels and pixels, the optimizer
// and the photo-sized source image the online modes preprocess.
type trainBench struct {
	ctx    context.Context
	o      TrainOptions
	cfg    clip.Config
	B      int
	m      *clip.Model
	a      *mma.Adapters
	l      *mma.Learner
	labels []int
	params []optim.Param
	opt    *optim.SGD
	src    *image.RGBA
	tf     preprocess.Transform
	pixels []float32
}

// logf logs one progress line.
func (t *trainBench) logf(s string) {
	if t.o.Log != nil {
		t.o.Log(s)
	}
}

// setup builds the adapters and learner on the model, C random class
// prompts, the batch's labels, the optimizer and the source image, drawing
// from one seeded generator in that order.
func (t *trainBench) setup() error {
	o, cfg, C := t.o, t.cfg, t.o.Classes
	rng := rand.New(rand.NewPCG(2, 3))
	ctxLen := cfg.Text.ContextLength
	tokens := make([]int, C*ctxLen)
	for c := 0; c < C; c++ {
		n := 5 + rng.IntN(8) // "a photo of a <class>." is 7–12 tokens
		tokens[c*ctxLen] = 49406
		for i := 1; i < n; i++ {
			tokens[c*ctxLen+i] = 1 + rng.IntN(49000)
		}
		tokens[c*ctxLen+n] = 49407
	}
	mcfg := mma.Config{Start: o.Start, End: cfg.Vision.Layers, Dim: o.Dim, Scale: 0.005}
	t.a = mma.New(mcfg, cfg.Vision.Width, cfg.Text.Width, rng)
	var err error
	if t.l, err = mma.NewLearner(t.m, t.a, nil); err != nil {
		return err
	}
	t.l.Split = !o.NoSplit && mma.CanSplit(o.Start, cfg.Vision.Layers)
	t.l.Attach()
	if err := t.l.SetClasses(tokens, C); err != nil {
		return err
	}
	t.labels = make([]int, t.B)
	for i := range t.labels {
		t.labels[i] = rng.IntN(C)
	}
	for _, n := range t.a.Names() {
		t.params = append(t.params, optim.Param{Name: n, Value: t.a.Params[n].Data, Grad: t.a.Grads[n].Data})
	}
	t.opt = optim.NewSGD(0.9, 5e-4, false)
	// A photo-sized source image for the online modes' decode-free
	// preprocessing (RandomResizedCrop + flip, or resize + center crop).
	t.src = image.NewRGBA(image.Rect(0, 0, 500, 375))
	for i := range t.src.Pix {
		t.src.Pix[i] = uint8(rng.IntN(256))
	}
	t.src.Set(0, 0, color.RGBA{1, 2, 3, 255})
	t.tf = preprocess.CLIPTransform(cfg.Vision.ImageSize)
	S := cfg.Vision.ImageSize
	t.pixels = make([]float32, t.B*3*S*S)
	return nil
}

// records computes the batch's cached records from pixels into dst: the
// prefix before block ℓ, or split records.
func (t *trainBench) records(dst []float32) []float32 {
	if t.l.Split {
		return clip.ImageSplitRecords(t.m, t.o.Start, t.pixels, t.B, dst)
	}
	return clip.ImagePrefix(t.m, t.o.Start, t.pixels, t.B, dst)
}

// augment preprocesses the source image into every image of the batch:
// training augmentation seeded by seed, or the evaluation transform.
func (t *trainBench) augment(train bool, seed uint64) {
	per := 3 * t.cfg.Vision.ImageSize * t.cfg.Vision.ImageSize
	nn.ParallelFor(t.B, 1, func(lo, hi int) {
		for k := lo; k < hi; k++ {
			var px []float32
			if train {
				px = t.tf.Augment(t.src, rand.New(rand.NewPCG(seed, uint64(k))))
			} else {
				px = t.tf.Eval(t.src)
			}
			copy(t.pixels[k*per:], px)
		}
	})
}

// step is one training step on the records pre.
func (t *trainBench) step(pre []float32) error {
	t.a.ZeroGrads()
	if _, _, err := t.l.Step(pre, t.B, t.labels); err != nil {
		return err
	}
	return t.opt.Step(0.001, t.params)
}

// timeIt measures f (after a warm-up: buffers grow once) into rate and
// spread.
func (t *trainBench) timeIt(name string, rate, spread *float64, f func(i int) error) error {
	t.logf(name)
	m, err := Measure(t.ctx, 1, t.o.Steps, f)
	*rate, *spread = m.PerS(t.B), m.Spread
	return err
}

// measure times training and evaluation on cached records and online
// (preprocessing and records computed at every step) into res.
func (t *trainBench) measure(res *TrainResult) error {
	t.augment(false, 0)
	t.logf("prefix")
	prefix := t.records(nil)
	if err := t.timeIt("train cached", &res.TrainCachedPerS, &res.TrainCachedSpread, func(int) error { return t.step(prefix) }); err != nil {
		return err
	}
	gemm.EnableStats(true)
	err := t.step(prefix)
	res.GemmGFLOPS = gemm.ReadStats().GFLOPS()
	gemm.EnableStats(false)
	if err != nil {
		return err
	}
	txt := append([]float32(nil), t.l.TextFeatures(false)...)
	if err := t.timeIt("eval cached", &res.EvalCachedPerS, &res.EvalCachedSpread, func(int) error { t.l.Logits(prefix, t.B, txt); return nil }); err != nil {
		return err
	}
	var buf []float32
	if err := t.timeIt("train online", &res.TrainOnlinePerS, &res.TrainOnlineSpread, func(i int) error {
		t.augment(true, uint64(i+2))
		buf = t.records(buf)
		return t.step(buf)
	}); err != nil {
		return err
	}
	return t.timeIt("eval online", &res.EvalOnlinePerS, &res.EvalOnlineSpread, func(int) error {
		t.augment(false, 0)
		buf = t.records(buf)
		t.l.Logits(buf, t.B, txt) // text features are computed once per evaluation, as in the cached mode
		return nil
	})
}

// TrainRow is one row of `pfedmma bench train`'s table: a rate, its
// spread and, against a reference, the ratio and the reference's rate.
type TrainRow struct {
	Name               string
	Rate, Spread       float64
	Speedup, Reference float64
	LikeForLike        bool // online rows, comparable with the reference as they are
}

// Rows lists the table's rows: first the like-for-like ones (online: every
// image through the whole encoder at every step, as the authors' training
// and evaluation do), then the cached ones (what pfedmma adds: the frozen
// prefix computed once per image).
func (r *TrainResult) Rows() []TrainRow {
	return []TrainRow{
		{"train, online augmentation (like for like)", r.TrainOnlinePerS, r.TrainOnlineSpread, r.SpeedupTrainOnline, r.ReferenceTrainPerS, true},
		{"eval, online, no cache (like for like)", r.EvalOnlinePerS, r.EvalOnlineSpread, r.SpeedupEvalOnline, r.ReferenceEvalPerS, true},
		{"train, cached prefixes", r.TrainCachedPerS, r.TrainCachedSpread, r.SpeedupTrainCached, r.ReferenceTrainPerS, false},
		{"eval, cached prefixes", r.EvalCachedPerS, r.EvalCachedSpread, r.SpeedupEvalCached, r.ReferenceEvalPerS, false},
	}
}

// peakRSSMiB reads the process's peak resident set size (VmHWM) on Linux;
// 0 where unavailable.
func peakRSSMiB() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			fields := strings.Fields(rest)
			if len(fields) > 0 {
				kb, _ := strconv.ParseFloat(fields[0], 64)
				return kb / 1024
			}
		}
	}
	return 0
}
