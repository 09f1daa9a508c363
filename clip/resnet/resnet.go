// Package resnet is CLIP's ResNet image encoder (OpenAI's ModifiedResNet,
// the RN50 family): a 3-convolution stem with a stride-2 first convolution
// and an average pool, anti-aliased bottleneck stages (average pooling
// before the strided 1×1 convolutions), and an attention-pooling head.
// Evaluation mode only: BatchNorm uses its running statistics, and is folded
// into the preceding convolution's weights and bias at load (exact up to
// float32 rounding). Activations are NCHW, [B, C, H, W].
//
// The image encoder is frozen in every method that runs on it (prompt and
// feature-level methods cache its output), so there is no backward pass.
package resnet

import (
	"fmt"
	"math"

	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/nn"
	"github.com/pfedmma/pfedmma/tensor"
)

// bnEps is BatchNorm's ε in CLIP's model code.
const bnEps = 1e-5

// Config is the architecture, inferred from the weights as CLIP's
// build_model does.
type Config struct {
	Layers    [4]int // bottlenecks per stage (RN50: 3, 4, 6, 3)
	Width     int    // stem width w (RN50: 64)
	ImageSize int    // input resolution (32 · the attention pool's grid side)
	Heads     int    // attention-pool heads: 32·w/64
	EmbedDim  int    // output features
}

// conv is a convolution with BatchNorm folded in: out = W ∗ x + b.
type conv struct {
	w      []float32 // [Cout, Cin·K·K]
	b      []float32 // [Cout]
	cin    int
	cout   int
	k, pad int
}

// bottleneck is one anti-aliased bottleneck block.
type bottleneck struct {
	c1, c2, c3 conv
	down       *conv // shortcut 1×1 convolution (after an average pool when stride > 1)
	stride     int
}

// Encoder is a loaded ResNet image encoder. It keeps buffers between calls
// and is not safe for concurrent use.
type Encoder struct {
	Cfg    Config
	stem   [3]conv
	stages [4][]bottleneck
	// attention pool
	pos                 []float32 // [HW+1, C]
	qW, qB, kW, kB      []float32
	vW, vB, cW, cB      []float32
	bufs                [6][]float32
	col                 []float32
	tok, q, kk, vv, att []float32
	// the last AttnPool's shape and softmax weights [B, heads, HW+1], for
	// AttnPoolBackward
	pb, pc, ph, pw int
	probs          []float32
	tk             tokenBufs // AttnPoolTokens' buffers (AttnPoolBackward's stay intact)
}

// FromTensors builds the encoder from OpenAI-named tensors (prefix
// "visual."); get returns a tensor or an error naming it.
func FromTensors(get func(name string) (*tensor.Tensor, error)) (*Encoder, error) {
	r := tensorReader{get: get}
	e := &Encoder{}
	if err := r.stem(e); err != nil {
		return nil, err
	}
	if err := r.stages(e); err != nil {
		return nil, err
	}
	if err := r.attnPool(e); err != nil {
		return nil, err
	}
	return e, nil
}

// tensorReader reads the image tower's tensors, each named "visual." + name.
type tensorReader struct {
	get func(name string) (*tensor.Tensor, error)
}

// ld is the values of visual.name, checked against shape when one is given.
func (r tensorReader) ld(name string, shape ...int) ([]float32, error) {
	t, err := r.get("visual." + name)
	if err != nil {
		return nil, err
	}
	if len(shape) > 0 && !tensor.SameShape(t.Shape, shape) {
		return nil, fmt.Errorf("tensor %q: shape %v, want %v", "visual."+name, t.Shape, shape)
	}
	return t.Data, nil
}

// convBN reads convolution cname [cout, cin, k, k] and BatchNorm bname
// [cout] and folds the BatchNorm into the convolution's weights and bias.
func (r tensorReader) convBN(cname, bname string, cin, cout, k, pad int) (conv, error) {
	w, err := r.ld(cname+".weight", cout, cin, k, k)
	if err != nil {
		return conv{}, err
	}
	g, err := r.ld(bname+".weight", cout)
	if err != nil {
		return conv{}, err
	}
	beta, err := r.ld(bname+".bias", cout)
	if err != nil {
		return conv{}, err
	}
	mean, err := r.ld(bname+".running_mean", cout)
	if err != nil {
		return conv{}, err
	}
	variance, err := r.ld(bname+".running_var", cout)
	if err != nil {
		return conv{}, err
	}
	c := conv{w: make([]float32, len(w)), b: make([]float32, cout), cin: cin, cout: cout, k: k, pad: pad}
	per := cin * k * k
	for o := 0; o < cout; o++ {
		if variance[o] < 0 {
			return conv{}, fmt.Errorf("tensor %q: negative running variance %v", "visual."+bname+".running_var", variance[o])
		}
		s := float64(g[o]) / math.Sqrt(float64(variance[o])+bnEps)
		for i := 0; i < per; i++ {
			c.w[o*per+i] = float32(float64(w[o*per+i]) * s)
		}
		c.b[o] = float32(float64(beta[o]) - float64(mean[o])*s)
	}
	return c, nil
}

// stem reads the three stem convolutions (3 → w/2 → w/2 → w) and sets the
// width w from conv1's [w/2, 3, 3, 3].
func (r tensorReader) stem(e *Encoder) error {
	c1, err := r.get("visual.conv1.weight")
	if err != nil {
		return err
	}
	if len(c1.Shape) != 4 || c1.Shape[1] != 3 || c1.Shape[2] != 3 {
		return fmt.Errorf("tensor %q: shape %v, want [w/2, 3, 3, 3]", "visual.conv1.weight", c1.Shape)
	}
	half := c1.Shape[0]
	w := 2 * half
	e.Cfg.Width = w
	if e.stem[0], err = r.convBN("conv1", "bn1", 3, half, 3, 1); err != nil {
		return err
	}
	if e.stem[1], err = r.convBN("conv2", "bn2", half, half, 3, 1); err != nil {
		return err
	}
	if e.stem[2], err = r.convBN("conv3", "bn3", half, w, 3, 1); err != nil {
		return err
	}
	return nil
}

// stages reads the four stages of bottlenecks (stage s has planes w·2^s
// and 4·planes outputs), as many per stage as the tensors hold, at least
// one.
func (r tensorReader) stages(e *Encoder) error {
	w := e.Cfg.Width
	inplanes := w
	for s := 0; s < 4; s++ {
		planes := w << s
		for i := 0; ; i++ {
			p := fmt.Sprintf("layer%d.%d.", s+1, i)
			if _, err := r.get("visual." + p + "conv1.weight"); err != nil {
				if i == 0 {
					return err
				}
				break
			}
			stride := 1
			if s > 0 && i == 0 {
				stride = 2
			}
			b, err := r.bottleneck(p, inplanes, planes, stride)
			if err != nil {
				return err
			}
			e.stages[s] = append(e.stages[s], b)
			e.Cfg.Layers[s]++
			inplanes = 4 * planes
		}
	}
	return nil
}

// bottleneck reads the block under prefix p: 1×1 inplanes → planes, 3×3
// planes → planes, 1×1 planes → 4·planes, and the downsampling shortcut
// when the stride or the width changes.
func (r tensorReader) bottleneck(p string, inplanes, planes, stride int) (bottleneck, error) {
	var b bottleneck
	var err error
	b.stride = stride
	if b.c1, err = r.convBN(p+"conv1", p+"bn1", inplanes, planes, 1, 0); err != nil {
		return b, err
	}
	if b.c2, err = r.convBN(p+"conv2", p+"bn2", planes, planes, 3, 1); err != nil {
		return b, err
	}
	if b.c3, err = r.convBN(p+"conv3", p+"bn3", planes, 4*planes, 1, 0); err != nil {
		return b, err
	}
	if stride > 1 || inplanes != 4*planes {
		d, err := r.convBN(p+"downsample.0", p+"downsample.1", inplanes, 4*planes, 1, 0)
		if err != nil {
			return b, err
		}
		b.down = &d
	}
	return b, nil
}

// attnPool reads the attention pool over C = 32·w channels: its positional
// embedding [grid²+1, C] (which sets the image size 32·grid), the q/k/v
// projections [C, C] and c_proj [embed, C] (which sets the output size).
func (r tensorReader) attnPool(e *Encoder) error {
	C := 32 * e.Cfg.Width
	pos, err := r.get("visual.attnpool.positional_embedding")
	if err != nil {
		return err
	}
	if len(pos.Shape) != 2 || pos.Shape[1] != C {
		return fmt.Errorf("tensor %q: shape %v, want [tokens, %d]", "visual.attnpool.positional_embedding", pos.Shape, C)
	}
	grid := int(math.Round(math.Sqrt(float64(pos.Shape[0] - 1))))
	if grid*grid+1 != pos.Shape[0] {
		return fmt.Errorf("tensor %q: %d tokens is not a square grid plus one", "visual.attnpool.positional_embedding", pos.Shape[0])
	}
	e.pos = pos.Data
	e.Cfg.ImageSize = 32 * grid
	e.Cfg.Heads = C / 64
	if C%64 != 0 || e.Cfg.Heads < 1 {
		return fmt.Errorf("attention pool width %d is not a multiple of 64", C)
	}
	for _, x := range []struct {
		name string
		w, b *[]float32
	}{{"q_proj", &e.qW, &e.qB}, {"k_proj", &e.kW, &e.kB}, {"v_proj", &e.vW, &e.vB}} {
		if *x.w, err = r.ld("attnpool."+x.name+".weight", C, C); err != nil {
			return err
		}
		if *x.b, err = r.ld("attnpool."+x.name+".bias", C); err != nil {
			return err
		}
	}
	cw, err := r.get("visual.attnpool.c_proj.weight")
	if err != nil {
		return err
	}
	if len(cw.Shape) != 2 || cw.Shape[1] != C {
		return fmt.Errorf("tensor %q: shape %v, want [embed, %d]", "visual.attnpool.c_proj.weight", cw.Shape, C)
	}
	e.cW, e.Cfg.EmbedDim = cw.Data, cw.Shape[0]
	if e.cB, err = r.ld("attnpool.c_proj.bias", e.Cfg.EmbedDim); err != nil {
		return err
	}
	return nil
}

// convForward computes out [B, Cout, Ho, Wo] = relu?(W ∗ in + b) for in
// [B, Cin, H, W] (stride 1, zero padding c.pad) by im2col and one GEMM per
// image.
func (e *Encoder) convForward(out, in []float32, c conv, B, H, W int, relu bool) {
	Ho, Wo := H+2*c.pad-c.k+1, W+2*c.pad-c.k+1
	n := Ho * Wo
	K := c.cin * c.k * c.k
	for b := 0; b < B; b++ {
		src := in[b*c.cin*H*W : (b+1)*c.cin*H*W]
		dst := out[b*c.cout*n : (b+1)*c.cout*n]
		col := src
		if c.k > 1 {
			e.col = nn.Grow(e.col, K*n)
			col = e.col
			im2col(col, src, c.cin, H, W, c.k, c.pad)
		}
		// dst [Cout, n] = W [Cout, K] · col [K, n]
		gemm.MatMul(false, false, c.cout, n, K, c.w, col, dst, false)
		for o := 0; o < c.cout; o++ {
			row := dst[o*n : (o+1)*n]
			bo := c.b[o]
			for i := range row {
				v := row[i] + bo
				if relu && v < 0 {
					v = 0
				}
				row[i] = v
			}
		}
	}
}

// im2col unrolls the k×k patches of x [C, H, W] (stride 1, zero padding
// pad) into col [C·k·k, Ho·Wo].
func im2col(col, x []float32, C, H, W, k, pad int) {
	Ho, Wo := H+2*pad-k+1, W+2*pad-k+1
	nn.ParallelFor(C, 1, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			for ky := 0; ky < k; ky++ {
				for kx := 0; kx < k; kx++ {
					row := col[((c*k+ky)*k+kx)*Ho*Wo:]
					for y := 0; y < Ho; y++ {
						sy := y + ky - pad
						for xx := 0; xx < Wo; xx++ {
							sx := xx + kx - pad
							v := float32(0)
							if sy >= 0 && sy < H && sx >= 0 && sx < W {
								v = x[(c*H+sy)*W+sx]
							}
							row[y*Wo+xx] = v
						}
					}
				}
			}
		}
	})
}

// convStrided is a convolution with a stride: the stem's first one. It
// runs the stride-1 convolution and keeps every stride-th output (exact;
// the stem is small).
func (e *Encoder) convStrided(out, in []float32, c conv, B, H, W, stride int) (int, int) {
	Ho, Wo := H+2*c.pad-c.k+1, W+2*c.pad-c.k+1
	full := make([]float32, B*c.cout*Ho*Wo)
	e.convForward(full, in, c, B, H, W, true)
	h2, w2 := (Ho+stride-1)/stride, (Wo+stride-1)/stride
	for b := 0; b < B*c.cout; b++ {
		for y := 0; y < h2; y++ {
			for x := 0; x < w2; x++ {
				out[(b*h2+y)*w2+x] = full[(b*Ho+y*stride)*Wo+x*stride]
			}
		}
	}
	return h2, w2
}

// avgPool averages k×k blocks (stride k) of x [N, H, W] into out [N, H/k, W/k].
func avgPool(out, x []float32, N, H, W, k int) {
	Ho, Wo := H/k, W/k
	inv := 1 / float32(k*k)
	for n := 0; n < N; n++ {
		for y := 0; y < Ho; y++ {
			for xx := 0; xx < Wo; xx++ {
				var s float32
				for dy := 0; dy < k; dy++ {
					for dx := 0; dx < k; dx++ {
						s += x[(n*H+y*k+dy)*W+xx*k+dx]
					}
				}
				out[(n*Ho+y)*Wo+xx] = s * inv
			}
		}
	}
}

// buf returns scratch buffer i with at least n floats.
func (e *Encoder) buf(i, n int) []float32 {
	e.bufs[i] = nn.Grow(e.bufs[i], n)
	return e.bufs[i][:n]
}

// bottleneckForward runs one block on x [B, Cin, H, W] and returns the
// output [B, 4·planes, H/stride, W/stride] and its side.
func (e *Encoder) bottleneckForward(x []float32, b bottleneck, B, H, W int) ([]float32, int, int) {
	planes := b.c1.cout
	h1 := e.buf(1, B*planes*H*W)
	e.convForward(h1, x, b.c1, B, H, W, true)
	h2 := e.buf(2, B*planes*H*W)
	e.convForward(h2, h1, b.c2, B, H, W, true)
	Ho, Wo := H/b.stride, W/b.stride
	if b.stride > 1 {
		p := e.buf(1, B*planes*Ho*Wo)
		avgPool(p, h2, B*planes, H, W, b.stride)
		h2 = p
	}
	out := e.buf(3, B*4*planes*Ho*Wo)
	e.convForward(out, h2, b.c3, B, Ho, Wo, false)
	short := x
	if b.down != nil {
		in := x
		if b.stride > 1 {
			p := e.buf(4, B*b.down.cin*Ho*Wo)
			avgPool(p, x, B*b.down.cin, H, W, b.stride)
			in = p
		}
		short = e.buf(5, B*4*planes*Ho*Wo)
		e.convForward(short, in, *b.down, B, Ho, Wo, false)
	}
	for i, v := range out {
		out[i] = max(v+short[i], 0)
	}
	res := e.buf(0, len(out))
	copy(res, out)
	return res, Ho, Wo
}

// Stages runs the stem and the four stages on pixels [B, 3, S, S] and calls
// visit after the stem (stage 0) and after each stage (1..4) with the
// activations [B, C, H, W].
func (e *Encoder) Stages(pixels []float32, B int, visit func(stage int, x []float32, C, H, W int)) ([]float32, int, int, int) {
	S := e.Cfg.ImageSize
	half := e.stem[0].cout
	h, w := (S+1)/2, (S+1)/2
	x := make([]float32, B*half*h*w)
	h, w = e.convStrided(x, pixels, e.stem[0], B, S, S, 2)
	y := make([]float32, B*half*h*w)
	e.convForward(y, x, e.stem[1], B, h, w, true)
	z := make([]float32, B*e.stem[2].cout*h*w)
	e.convForward(z, y, e.stem[2], B, h, w, true)
	C := e.stem[2].cout
	out := e.buf(0, B*C*(h/2)*(w/2))
	avgPool(out, z, B*C, h, w, 2)
	h, w = h/2, w/2
	if visit != nil {
		visit(0, out, C, h, w)
	}
	for s := 0; s < 4; s++ {
		for _, b := range e.stages[s] {
			out, h, w = e.bottleneckForward(out, b, B, h, w)
			C = b.c3.cout
		}
		if visit != nil {
			visit(s+1, out, C, h, w)
		}
	}
	return out, C, h, w
}

// Encode writes the image features [B, EmbedDim] of pixels [B, 3, S, S]
// (normalised) into feat.
func (e *Encoder) Encode(feat, pixels []float32, B int) {
	x, C, H, W := e.Stages(pixels, B, nil)
	e.AttnPool(feat, x, B, C, H, W)
}

// AttnPool is CLIP's attention pooling of x [B, C, H, W] into feat
// [B, EmbedDim]: the HW positions (row-major) as tokens, their mean
// prepended, positional embeddings added, multi-head attention with the
// mean token as the only query, then c_proj.
func (e *Encoder) AttnPool(feat, x []float32, B, C, H, W int) {
	T := H*W + 1
	heads := e.Cfg.Heads
	dh := C / heads
	e.tok = nn.Grow(e.tok, B*T*C)
	poolTokens(e.tok, x, e.pos, B, C, H, W)
	// q for the mean token only; k, v for every token
	e.q = nn.Grow(e.q, B*C)
	q0 := make([]float32, B*C)
	for b := 0; b < B; b++ {
		copy(q0[b*C:(b+1)*C], e.tok[(b*T)*C:(b*T+1)*C])
	}
	nn.LinearForward(e.q, q0, e.qW, e.qB, B, C, C)
	e.kk = nn.Grow(e.kk, B*T*C)
	nn.LinearForward(e.kk, e.tok, e.kW, e.kB, B*T, C, C)
	e.vv = nn.Grow(e.vv, B*T*C)
	nn.LinearForward(e.vv, e.tok, e.vW, e.vB, B*T, C, C)
	e.att = nn.Grow(e.att, B*C)
	e.probs = nn.Grow(e.probs, B*heads*T)
	e.pb, e.pc, e.ph, e.pw = B, C, H, W
	scale := 1 / math.Sqrt(float64(dh))
	scores := make([]float64, T)
	for b := 0; b < B; b++ {
		for h := 0; h < heads; h++ {
			q := e.q[b*C+h*dh : b*C+(h+1)*dh]
			mx := math.Inf(-1)
			for t := 0; t < T; t++ {
				k := e.kk[(b*T+t)*C+h*dh : (b*T+t)*C+(h+1)*dh]
				var s float64
				for i := range q {
					s += float64(q[i]) * float64(k[i])
				}
				scores[t] = s * scale
				mx = math.Max(mx, scores[t])
			}
			var z float64
			for t := range scores {
				scores[t] = math.Exp(scores[t] - mx)
				z += scores[t]
			}
			for t := range scores {
				e.probs[(b*heads+h)*T+t] = float32(scores[t] / z)
			}
			out := e.att[b*C+h*dh : b*C+(h+1)*dh]
			for i := range out {
				var s float64
				for t := 0; t < T; t++ {
					s += scores[t] * float64(e.vv[(b*T+t)*C+h*dh+i])
				}
				out[i] = float32(s / z)
			}
		}
	}
	nn.LinearForward(feat, e.att, e.cW, e.cB, B, C, e.Cfg.EmbedDim)
}

// poolTokens writes the attention pool's input tokens tok [B, HW+1, C] of
// x [B, C, H, W]: token 0 the mean of the HW positions, tokens 1..HW the
// positions in row-major order (h·W + w), each plus its positional
// embedding pos [HW+1, C].
func poolTokens(tok, x, pos []float32, B, C, H, W int) {
	T := H*W + 1
	for b := 0; b < B; b++ {
		for c := 0; c < C; c++ {
			var s float64
			for p := 0; p < H*W; p++ {
				v := x[(b*C+c)*H*W+p]
				tok[(b*T+1+p)*C+c] = v
				s += float64(v)
			}
			tok[(b*T)*C+c] = float32(s / float64(H*W))
		}
		for t := 0; t < T; t++ {
			row := tok[(b*T+t)*C : (b*T+t+1)*C]
			for c := range row {
				row[c] += pos[t*C+c]
			}
		}
	}
}

// AttnPoolBackward adds to dx [B, C, H, W] the gradient of the last
// AttnPool's output given dfeat [B, EmbedDim] (the pooled weights are
// frozen: no weight gradients).
//
//	att = Σ_t p_t v_t per head; p = softmax(scale·q·k_t); q from the mean
//	token, k and v from every token; tokens = [mean(x); x] + pos
func (e *Encoder) AttnPoolBackward(dx, dfeat []float32) {
	B, C, H, W := e.pb, e.pc, e.ph, e.pw
	T, heads := H*W+1, e.Cfg.Heads
	dh := C / heads
	scale := float32(1 / math.Sqrt(float64(dh)))
	datt := make([]float32, B*C)
	nn.LinearBackward(datt, nil, nil, dfeat, e.att, e.cW, B, C, e.Cfg.EmbedDim) // datt = dfeat · c_proj
	dq := make([]float32, B*C)
	dk := make([]float32, B*T*C)
	dv := make([]float32, B*T*C)
	dp := make([]float32, T)
	for b := 0; b < B; b++ {
		for h := 0; h < heads; h++ {
			p := e.probs[(b*heads+h)*T : (b*heads+h+1)*T]
			da := datt[b*C+h*dh : b*C+(h+1)*dh]
			q := e.q[b*C+h*dh : b*C+(h+1)*dh]
			var dot float32
			for t := 0; t < T; t++ {
				v := e.vv[(b*T+t)*C+h*dh : (b*T+t)*C+(h+1)*dh]
				dvt := dv[(b*T+t)*C+h*dh : (b*T+t)*C+(h+1)*dh]
				var s float32
				for i := range da {
					dvt[i] += p[t] * da[i] // dv_t = p_t · datt
					s += da[i] * v[i]
				}
				dp[t] = s
				dot += p[t] * s
			}
			dqh := dq[b*C+h*dh : b*C+(h+1)*dh]
			for t := 0; t < T; t++ {
				ds := p[t] * (dp[t] - dot) * scale // softmax backward, through the scale
				k := e.kk[(b*T+t)*C+h*dh : (b*T+t)*C+(h+1)*dh]
				dkt := dk[(b*T+t)*C+h*dh : (b*T+t)*C+(h+1)*dh]
				for i := range dqh {
					dqh[i] += ds * k[i]
					dkt[i] += ds * q[i]
				}
			}
		}
	}
	dtok := make([]float32, B*T*C)
	nn.LinearBackward(dtok, nil, nil, dk, e.tok, e.kW, B*T, C, C)
	nn.LinearBackward(dtok, nil, nil, dv, e.tok, e.vW, B*T, C, C)
	dq0 := make([]float32, B*C)
	nn.LinearBackward(dq0, nil, nil, dq, nil, e.qW, B, C, C)
	inv := 1 / float32(H*W)
	for b := 0; b < B; b++ {
		for c := 0; c < C; c++ {
			mean := dtok[(b*T)*C+c] + dq0[b*C+c] // the mean token: key/value and query
			for pp := 0; pp < H*W; pp++ {
				dx[(b*C+c)*H*W+pp] += dtok[(b*T+1+pp)*C+c] + mean*inv
			}
		}
	}
}
