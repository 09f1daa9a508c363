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
	logf := func(s string) {
		if o.Log != nil {
			o.Log(s)
		}
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
	res := &EngineResult{CPU: gemm.CPU(), Backend: gemm.Backend(), Core: inUse, BestCore: best, Precision: o.Precision.String(),
		Threads: gemm.Threads(), Batch: B, Repeat: o.Repeat}
	if o.Precision == gemm.BF16 {
		res.BF16Backend = gemm.BF16Backend()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	randv := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = rng.Float32()*2 - 1
		}
		return v
	}

	// GEMM: the MLP's c_fc shape, [B·T, D] × [D, 4D]; peak = best of the repeats
	logf("gemm")
	m, n, k := B*T, vc.MLPWidth, D
	a, w, c := randv(m*k), randv(n*k), make([]float32, m*n)
	peak := func(f func()) (float64, error) {
		f()
		best := 0.0
		for i := 0; i < max(o.Repeat, 3); i++ {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			t0 := time.Now()
			f()
			best = max(best, 2*float64(m*n*k)/time.Since(t0).Seconds()/1e9)
		}
		return best, nil
	}
	var err error
	if res.GemmGFLOPS, err = peak(func() { gemm.MatMul(false, true, m, n, k, a, w, c, false) }); err != nil {
		return nil, err
	}
	if o.Precision == gemm.BF16 {
		wb, err := gemm.NewBF16Weights(w, n, k)
		if err != nil {
			return nil, err
		}
		if res.GemmBF16GFLOPS, err = peak(func() { gemm.MatMulBF16(true, m, n, k, a, wb, nil, c, false) }); err != nil {
			return nil, err
		}
	}

	// One block forward and backward (input gradients only, frozen weights).
	logf("block")
	weights := clip.Random(clip.Config{EmbedDim: o.Config.EmbedDim, Vision: clip.VisionConfig{
		ImageSize: vc.ImageSize, PatchSize: vc.PatchSize, Width: D, Layers: vc.Layers, Heads: vc.Heads, MLPWidth: vc.MLPWidth},
		Text: clip.TextConfig{ContextLength: 77, VocabSize: 16, Width: 64, Layers: 1, Heads: 1, MLPWidth: 64}}, 1)
	model := clip.New(weights)
	if err := model.SetPrecision(o.Precision); err != nil {
		return nil, err
	}
	blk := model.Vision.Stack.Blocks[0]
	var sc clip.BlockScratch
	x, out, dx := randv(B*T*D), make([]float32, B*T*D), make([]float32, B*T*D)
	dout := randv(B * T * D)
	fwd, err := Measure(ctx, 1, o.Repeat, func(int) error { blk.Forward(out, x, B, T, nil, true, &sc); return nil })
	if err != nil {
		return nil, err
	}
	bwd, err := Measure(ctx, 1, o.Repeat, func(int) error { blk.Backward(dx, dout, &sc); return nil })
	if err != nil {
		return nil, err
	}
	// GEMM rate inside the block: the linear layers' products, measured in
	// place (the attention heads' small products run one per thread).
	gemm.EnableStats(true)
	blk.Forward(out, x, B, T, nil, true, &sc)
	st := gemm.ReadStats()
	gemm.EnableStats(false)
	peakRate := res.GemmGFLOPS
	if o.Precision == gemm.BF16 {
		peakRate = res.GemmBF16GFLOPS
	}
	res.BlockLinearGFLOPS = st.GFLOPS()
	res.BlockForwardMs, res.BlockForwardSpread = fwd.Median*1000, fwd.Spread
	res.BlockBackwardMs, res.BlockBackwardSpread = bwd.Median*1000, bwd.Spread
	res.BlockBackwardRatio = res.BlockBackwardMs / res.BlockForwardMs
	res.BlockForwardGFLOPS = blockFLOPs(B, T, D, vc.MLPWidth) / fwd.Median / 1e9
	res.BlockGemmShareOfPeak = res.BlockForwardGFLOPS / peakRate
	res.BlockLinearShareOfPeak = res.BlockLinearGFLOPS / peakRate

	// Whole image encoder forward.
	logf("image encoder")
	pixels := randv(B * 3 * vc.ImageSize * vc.ImageSize)
	feat := make([]float32, B*o.Config.EmbedDim)
	enc, err := Measure(ctx, 1, o.Repeat, func(int) error { model.Vision.Encode(feat, pixels, B); return nil })
	if err != nil {
		return nil, err
	}
	gemm.EnableStats(true)
	t0 := time.Now()
	model.Vision.Encode(feat, pixels, B)
	wall := time.Since(t0).Seconds()
	st = gemm.ReadStats()
	gemm.EnableStats(false)
	res.ImageForwardSecPerBatch = enc.Median
	res.ImageForwardSpread = enc.Spread
	res.ImageForwardImagesPerS = enc.PerS(B)
	res.ImageForwardGemmGFLOPS = st.GFLOPS()
	res.ImageForwardGemmShare = st.Seconds / wall
	return res, nil
}
