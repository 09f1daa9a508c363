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

// EngineResult is what `pfedmma bench engine` reports.
type EngineResult struct {
	Backend                 string  `json:"backend"`
	Core                    string  `json:"core"`
	Threads                 int     `json:"threads"`
	Batch                   int     `json:"batch"`
	GemmGFLOPS              float64 `json:"gemm_gflops"`
	BlockForwardMs          float64 `json:"block_forward_ms"`
	BlockBackwardMs         float64 `json:"block_backward_ms"`
	BlockBackwardRatio      float64 `json:"block_backward_over_forward"`
	BlockForwardGFLOPS      float64 `json:"block_forward_gflops"`
	BlockGemmShareOfPeak    float64 `json:"block_forward_fraction_of_gemm_peak"`
	BlockLinearGFLOPS       float64 `json:"block_linear_gemm_gflops"`
	BlockLinearShareOfPeak  float64 `json:"block_linear_gemm_fraction_of_peak"`
	ImageForwardImagesPerS  float64 `json:"image_forward_images_per_s"`
	ImageForwardSecPerBatch float64 `json:"image_forward_s_per_batch"`
}

// EngineOptions choose the sizes of the engine benchmark.
type EngineOptions struct {
	Batch  int          // images per batch (32)
	Config clip.Config  // model shapes (ViT-B/16)
	Repeat int          // timed repetitions of each measurement (≥ 1)
	Log    func(string) // progress lines; may be nil
}

// blockFLOPs is the forward FLOP count of one full block on N = B·T tokens.
func blockFLOPs(B, T, D, H int) float64 {
	N := float64(B * T)
	gemms := 2 * N * float64(D) * float64(3*D+D+2*H)
	attn := 2 * 2 * float64(B) * float64(T) * float64(T) * float64(D)
	return gemms + attn
}

// Engine runs the engine benchmark.
func Engine(ctx context.Context, o EngineOptions) (*EngineResult, error) {
	if o.Batch <= 0 {
		o.Batch = 32
	}
	if o.Repeat <= 0 {
		o.Repeat = 3
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
	res := &EngineResult{Backend: gemm.Backend(), Core: gemm.CoreName(), Threads: gemm.Threads(), Batch: B}
	rng := rand.New(rand.NewPCG(1, 2))
	randv := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = rng.Float32()*2 - 1
		}
		return v
	}

	// GEMM: the MLP's c_fc shape, [B·T, D] × [D, 4D]
	logf("gemm")
	m, n, k := B*T, vc.MLPWidth, D
	a, w, c := randv(m*k), randv(n*k), make([]float32, m*n)
	gemm.MatMul(false, true, m, n, k, a, w, c, false)
	for i := 0; i < max(o.Repeat, 3); i++ { // peak: the best of the repeats
		t0 := time.Now()
		gemm.MatMul(false, true, m, n, k, a, w, c, false)
		res.GemmGFLOPS = max(res.GemmGFLOPS, 2*float64(m*n*k)/time.Since(t0).Seconds()/1e9)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	// One block forward and backward (input gradients only, frozen weights).
	logf("block")
	weights := clip.Random(clip.Config{EmbedDim: o.Config.EmbedDim, Vision: clip.VisionConfig{
		ImageSize: vc.ImageSize, PatchSize: vc.PatchSize, Width: D, Layers: vc.Layers, Heads: vc.Heads, MLPWidth: vc.MLPWidth},
		Text: clip.TextConfig{ContextLength: 77, VocabSize: 16, Width: 64, Layers: 1, Heads: 1, MLPWidth: 64}}, 1)
	model := clip.New(weights)
	blk := model.Vision.Stack.Blocks[0]
	var sc clip.BlockScratch
	x, out, dx := randv(B*T*D), make([]float32, B*T*D), make([]float32, B*T*D)
	dout := randv(B * T * D)
	blk.Forward(out, x, B, T, nil, true, &sc)
	blk.Backward(dx, dout, &sc)
	var fwd, bwd time.Duration
	for i := 0; i < o.Repeat; i++ {
		t0 := time.Now()
		blk.Forward(out, x, B, T, nil, true, &sc)
		t1 := time.Now()
		blk.Backward(dx, dout, &sc)
		fwd += t1.Sub(t0)
		bwd += time.Since(t1)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	// GEMM rate inside the block: the linear layers' products, measured in
	// place (the attention heads' small products run one per thread).
	gemm.EnableStats(true)
	blk.Forward(out, x, B, T, nil, true, &sc)
	st := gemm.ReadStats()
	gemm.EnableStats(false)
	res.BlockLinearGFLOPS = st.GFLOPS()
	res.BlockForwardMs = fwd.Seconds() * 1000 / float64(o.Repeat)
	res.BlockBackwardMs = bwd.Seconds() * 1000 / float64(o.Repeat)
	res.BlockBackwardRatio = res.BlockBackwardMs / res.BlockForwardMs
	res.BlockForwardGFLOPS = blockFLOPs(B, T, D, vc.MLPWidth) / (res.BlockForwardMs / 1000) / 1e9
	res.BlockGemmShareOfPeak = res.BlockForwardGFLOPS / res.GemmGFLOPS
	res.BlockLinearShareOfPeak = res.BlockLinearGFLOPS / res.GemmGFLOPS

	// Whole image encoder forward.
	logf("image encoder")
	pixels := randv(B * 3 * vc.ImageSize * vc.ImageSize)
	feat := make([]float32, B*o.Config.EmbedDim)
	model.Vision.Encode(feat, pixels, B)
	start := time.Now()
	for i := 0; i < o.Repeat; i++ {
		model.Vision.Encode(feat, pixels, B)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	sec := time.Since(start).Seconds() / float64(o.Repeat)
	res.ImageForwardSecPerBatch = sec
	res.ImageForwardImagesPerS = float64(B) / sec
	return res, nil
}
