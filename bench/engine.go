// Package bench measures the engine and the training loop at ViT-B/16 shapes
// with random weights; `pfedmma bench` prints its results.
package bench

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/gemm"
)

// EngineResult is what `pfedmma bench engine` reports. Times are medians
// over the timed repetitions; *_spread is the interquartile range over the
// median.
type EngineResult struct {
	CPU                     gemm.CPUInfo `json:"cpu"`
	Backend                 string       `json:"backend"`
	Core                    string       `json:"core"`      // kernel family in use
	BestCore                string       `json:"best_core"` // best family this CPU supports ("" when unknown)
	Precision               string       `json:"precision"` // fp32 or bf16 (frozen weights' products)
	BF16Backend             string       `json:"bf16_backend,omitempty"`
	Threads                 int          `json:"threads"`
	Batch                   int          `json:"batch"`
	Repeat                  int          `json:"repeat"`
	GemmGFLOPS              float64      `json:"gemm_gflops"` // float32 GEMM, best of the repeats
	GemmBF16GFLOPS          float64      `json:"gemm_bf16_gflops,omitempty"`
	BlockForwardMs          float64      `json:"block_forward_ms"`
	BlockForwardSpread      float64      `json:"block_forward_spread"`
	BlockBackwardMs         float64      `json:"block_backward_ms"`
	BlockBackwardSpread     float64      `json:"block_backward_spread"`
	BlockBackwardRatio      float64      `json:"block_backward_over_forward"`
	BlockForwardGFLOPS      float64      `json:"block_forward_gflops"`
	BlockGemmShareOfPeak    float64      `json:"block_forward_fraction_of_gemm_peak"`
	BlockLinearGFLOPS       float64      `json:"block_linear_gemm_gflops"`
	BlockLinearShareOfPeak  float64      `json:"block_linear_gemm_fraction_of_peak"`
	ImageForwardImagesPerS  float64      `json:"image_forward_images_per_s"`
	ImageForwardSecPerBatch float64      `json:"image_forward_s_per_batch"`
	ImageForwardSpread      float64      `json:"image_forward_spread"`
	ImageForwardGemmGFLOPS  float64      `json:"image_forward_gemm_gflops"`     // achieved inside the encoder's counted GEMMs
	ImageForwardGemmShare   float64      `json:"image_forward_gemm_time_share"` // fraction of the forward time in those GEMMs
}

// EngineOptions choose the sizes of the engine benchmark.
type EngineOptions struct {
	Batch     int            // images per batch (32)
	Config    clip.Config    // model shapes (ViT-B/16)
	Repeat    int            // timed repetitions of each measurement (MinSteps when ≤ 0)
	Precision gemm.Precision // products with the frozen weights (FP32)
	Log       func(string)   // progress lines; may be nil
}

// blockFLOPs is the forward FLOP count of one full block on N = B·T tokens
// (mlp is the MLP width).
func blockFLOPs(B, T, D, mlp int) float64 {
	N := float64(B * T)
	gemms := 2 * N * float64(D) * float64(3*D+D+2*mlp)
	attn := 2 * 2 * float64(B) * float64(T) * float64(T) * float64(D)
	return gemms + attn
}

// Engine runs the engine benchmark.
func Engine(ctx context.Context, o EngineOptions) (*EngineResult, error) {
	if o.Batch <= 0 {
		o.Batch = 32
	}
	if o.Repeat <= 0 {
		o.Repeat = MinSteps
	}
	if o.Config.Vision.Width == 0 {
		o.Config = clip.ViTB16()
	}
	vc := o.Config.Vision
	B, T, D := o.Batch, vc.Tokens(), vc.Width
	if o.Precision == gemm.Auto {
		p := gemm.ProbePrecision([]gemm.Shape{{M: B * T, N: 3 * D, K: D}, {M: B * T, N: D, K: D}, {M: B * T, N: 4 * D, K: D}, {M: B * T, N: D, K: 4 * D}}, 400*time.Millisecond)
		o.Precision = p.Chosen
		if o.Log != nil {
			o.Log("precision auto: " + p.String())
		}
	}
	inUse, best := gemm.KernelFamily()
	e := &engineRun{ctx: ctx, o: o, B: B, T: T, D: D, rng: rand.New(rand.NewPCG(1, 2)),
		res: &EngineResult{CPU: gemm.CPU(), Backend: gemm.Backend(), Core: inUse, BestCore: best, Precision: o.Precision.String(),
			Threads: gemm.Threads(), Batch: B, Repeat: o.Repeat}}
	if o.Precision == gemm.BF16 {
		e.res.BF16Backend = gemm.BF16Backend()
	}
	if err := e.gemmRate(); err != nil {
		return nil, err
	}
	model, err := e.blockTimes()
	if err != nil {
		return nil, err
	}
	if err := e.encoderTimes(model); err != nil {
		return nil, err
	}
	return e.res, nil
}

// engineRun is one Engine benchmark: its options, shapes, random source
// and the result its three measurements fill in turn.
type engineRun struct {
	ctx     context.Context
	o       EngineOptions
	B, T, D int
	rng     *rand.Rand
	res     *EngineResult
}

// logf logs one progress line.
func (e *engineRun) logf(s string) {
	if e.o.Log != nil {
		e.o.Log(s)
	}
}

// randv is n values uniform in [-1, 1).
func (e *engineRun) randv(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = e.rng.Float32()*2 - 1
	}
	return v
}

// gemmRate measures the GEMM rate at the MLP's c_fc shape, [B·T, D] × [D, 4D]
// (peak: the best of the repeats), in float32 and with BF16 in bfloat16.
func (e *engineRun) gemmRate() error {
	e.logf("gemm")
	m, n, k := e.B*e.T, e.o.Config.Vision.MLPWidth, e.D
	a, w, c := e.randv(m*k), e.randv(n*k), make([]float32, m*n)
	peak := func(f func()) (float64, error) {
		f()
		best := 0.0
		for i := 0; i < max(e.o.Repeat, 3); i++ {
			if err := e.ctx.Err(); err != nil {
				return 0, err
			}
			t0 := time.Now()
			f()
			best = max(best, 2*float64(m*n*k)/time.Since(t0).Seconds()/1e9)
		}
		return best, nil
	}
	var err error
	if e.res.GemmGFLOPS, err = peak(func() { gemm.MatMul(false, true, m, n, k, a, w, c, false) }); err != nil {
		return err
	}
	if e.o.Precision == gemm.BF16 {
		wb, err := gemm.NewBF16Weights(w, n, k)
		if err != nil {
			return err
		}
		if e.res.GemmBF16GFLOPS, err = peak(func() { gemm.MatMulBF16(true, m, n, k, a, wb, nil, c, false) }); err != nil {
			return err
		}
	}
	return nil
}

// blockTimes measures one block's forward and backward (input gradients only,
// frozen weights) and returns the random model it built.
func (e *engineRun) blockTimes() (*clip.Model, error) {
	e.logf("block")
	vc, B, T, D := e.o.Config.Vision, e.B, e.T, e.D
	weights := clip.Random(clip.Config{EmbedDim: e.o.Config.EmbedDim, Vision: clip.VisionConfig{
		ImageSize: vc.ImageSize, PatchSize: vc.PatchSize, Width: D, Layers: vc.Layers, Heads: vc.Heads, MLPWidth: vc.MLPWidth},
		Text: clip.TextConfig{ContextLength: 77, VocabSize: 16, Width: 64, Layers: 1, Heads: 1, MLPWidth: 64}}, 1)
	model := clip.New(weights)
	if err := model.SetPrecision(e.o.Precision); err != nil {
		return nil, err
	}
	blk := model.Vision.Stack.Blocks[0]
	var sc clip.BlockScratch
	x, out, dx := e.randv(B*T*D), make([]float32, B*T*D), make([]float32, B*T*D)
	dout := e.randv(B * T * D)
	fwd, err := Measure(e.ctx, 1, e.o.Repeat, func(int) error { blk.Forward(out, x, B, T, nil, true, &sc); return nil })
	if err != nil {
		return nil, err
	}
	bwd, err := Measure(e.ctx, 1, e.o.Repeat, func(int) error { blk.Backward(dx, dout, &sc); return nil })
	if err != nil {
		return nil, err
	}
	// GEMM rate inside the block: the linear layers' products, measured in
	// place (the attention heads' small products run one per thread).
	gemm.EnableStats(true)
	blk.Forward(out, x, B, T, nil, true, &sc)
	st := gemm.ReadStats()
	gemm.EnableStats(false)
	res := e.res
	peakRate := res.GemmGFLOPS
	if e.o.Precision == gemm.BF16 {
		peakRate = res.GemmBF16GFLOPS
	}
	res.BlockLinearGFLOPS = st.GFLOPS()
	res.BlockForwardMs, res.BlockForwardSpread = fwd.Median*1000, fwd.Spread
	res.BlockBackwardMs, res.BlockBackwardSpread = bwd.Median*1000, bwd.Spread
	res.BlockBackwardRatio = res.BlockBackwardMs / res.BlockForwardMs
	res.BlockForwardGFLOPS = blockFLOPs(B, T, D, vc.MLPWidth) / fwd.Median / 1e9
	res.BlockGemmShareOfPeak = res.BlockForwardGFLOPS / peakRate
	res.BlockLinearShareOfPeak = res.BlockLinearGFLOPS / peakRate
	return model, nil
}

// encoderTimes measures the whole image encoder's forward.
func (e *engineRun) encoderTimes(model *clip.Model) error {
	e.logf("image encoder")
	B, vc := e.B, e.o.Config.Vision
	pixels := e.randv(B * 3 * vc.ImageSize * vc.ImageSize)
	feat := make([]float32, B*e.o.Config.EmbedDim)
	enc, err := Measure(e.ctx, 1, e.o.Repeat, func(int) error { model.Vision.Encode(feat, pixels, B); return nil })
	if err != nil {
		return err
	}
	gemm.EnableStats(true)
	t0 := time.Now()
	model.Vision.Encode(feat, pixels, B)
	wall := time.Since(t0).Seconds()
	st := gemm.ReadStats()
	gemm.EnableStats(false)
	res := e.res
	res.ImageForwardSecPerBatch = enc.Median
	res.ImageForwardSpread = enc.Spread
	res.ImageForwardImagesPerS = enc.PerS(B)
	res.ImageForwardGemmGFLOPS = st.GFLOPS()
	res.ImageForwardGemmShare = st.Seconds / wall
	return nil
}
