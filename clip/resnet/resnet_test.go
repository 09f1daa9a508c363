package resnet

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/internal/gradcheck"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

const testdata = "../../testdata/clip-rn-tiny/"

func loadFixture(t *testing.T) (*Encoder, *safetensors.File) {
	t.Helper()
	w, err := safetensors.Open(testdata + "openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	e, err := FromTensors(func(name string) (*tensor.Tensor, error) { return w.Float32(name) })
	if err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(testdata + "forward.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return e, f
}

func closeTo(t *testing.T, name string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); !(d <= 1e-4*(1+math.Abs(float64(want[i])))) {
			t.Fatalf("%s[%d] = %v, want %v", name, i, got[i], want[i])
		}
	}
}

// TestFixture reproduces the authors' ModifiedResNet: every stage's output
// and the image features.
func TestFixture(t *testing.T) {
	e, f := loadFixture(t)
	if e.Cfg != (Config{Layers: [4]int{2, 1, 1, 1}, Width: 8, ImageSize: 64, Heads: 4, EmbedDim: 32}) {
		t.Fatalf("inferred config %+v", e.Cfg)
	}
	img, err := f.Float32("images")
	if err != nil {
		t.Fatal(err)
	}
	B := img.Shape[0]
	names := []string{"stem_out", "layer1_out", "layer2_out", "layer3_out", "layer4_out"}
	x, C, H, W := e.Stages(img.Data, B, func(stage int, x []float32, C, H, W int) {
		want, err := f.Float32(names[stage])
		if err != nil {
			t.Fatal(err)
		}
		if want.Shape[1] != C || want.Shape[2] != H || want.Shape[3] != W {
			t.Fatalf("%s: [%d %d %d], want %v", names[stage], C, H, W, want.Shape)
		}
		closeTo(t, names[stage], x, want.Data)
	})
	feat := make([]float32, B*e.Cfg.EmbedDim)
	e.AttnPool(feat, append([]float32(nil), x...), B, C, H, W)
	want, err := f.Float32("image_features")
	if err != nil {
		t.Fatal(err)
	}
	closeTo(t, "image_features", feat, want.Data)
	again := make([]float32, len(feat))
	e.Encode(again, img.Data, B)
	closeTo(t, "Encode", again, want.Data)
}

// TestConvMatchesDirect checks the im2col convolution against a direct
// loop on random data.
func TestConvMatchesDirect(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	c := conv{cin: 3, cout: 5, k: 3, pad: 1, w: make([]float32, 5*3*9), b: make([]float32, 5)}
	for i := range c.w {
		c.w[i] = float32(r.NormFloat64())
	}
	for i := range c.b {
		c.b[i] = float32(r.NormFloat64())
	}
	B, H, W := 2, 6, 7
	x := make([]float32, B*3*H*W)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	got := make([]float32, B*5*H*W)
	(&Encoder{}).convForward(got, x, c, B, H, W, false)
	for b := 0; b < B; b++ {
		for o := 0; o < 5; o++ {
			for y := 0; y < H; y++ {
				for xx := 0; xx < W; xx++ {
					s := float64(c.b[o])
					for ci := 0; ci < 3; ci++ {
						for ky := 0; ky < 3; ky++ {
							for kx := 0; kx < 3; kx++ {
								sy, sx := y+ky-1, xx+kx-1
								if sy >= 0 && sy < H && sx >= 0 && sx < W {
									s += float64(c.w[((o*3+ci)*3+ky)*3+kx]) * float64(x[((b*3+ci)*H+sy)*W+sx])
								}
							}
						}
					}
					if g := got[((b*5+o)*H+y)*W+xx]; math.Abs(float64(g)-s) > 1e-4 {
						t.Fatalf("out[%d,%d,%d,%d] = %v, want %v", b, o, y, xx, g, s)
					}
				}
			}
		}
	}
}

func TestBadTensors(t *testing.T) {
	w, err := safetensors.Open(testdata + "openai.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, drop := range []string{"visual.layer2.0.bn2.running_var", "visual.attnpool.q_proj.bias", "visual.conv1.weight"} {
		_, err := FromTensors(func(name string) (*tensor.Tensor, error) {
			if name == drop {
				return nil, fmt.Errorf("tensor %q missing", name)
			}
			return w.Float32(name)
		})
		if err == nil || !strings.Contains(err.Error(), drop) {
			t.Errorf("without %s: %v", drop, err)
		}
	}
	_, err = FromTensors(func(name string) (*tensor.Tensor, error) {
		x, err := w.Float32(name)
		if name == "visual.layer3.0.conv2.weight" && err == nil {
			x.Shape = []int{1, len(x.Data)}
		}
		return x, err
	})
	if err == nil || !strings.Contains(err.Error(), "layer3.0.conv2.weight") {
		t.Errorf("mis-shaped tensor: %v", err)
	}
}

// TestAttnPoolBackward checks the attention pool's input gradient against
// central finite differences of L = Σ feat ⊙ r on random weights.
func TestAttnPoolBackward(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2))
	const B, C, H, W, E, heads = 2, 8, 2, 3, 6, 2
	T := H*W + 1
	e := &Encoder{Cfg: Config{Heads: heads, EmbedDim: E},
		pos: gradcheck.Rand(rng, T*C, 0.5),
		qW:  gradcheck.Rand(rng, C*C, 0.5), qB: gradcheck.Rand(rng, C, 0.2),
		kW: gradcheck.Rand(rng, C*C, 0.5), kB: gradcheck.Rand(rng, C, 0.2),
		vW: gradcheck.Rand(rng, C*C, 0.5), vB: gradcheck.Rand(rng, C, 0.2),
		cW: gradcheck.Rand(rng, E*C, 0.5), cB: gradcheck.Rand(rng, E, 0.2)}
	x := gradcheck.Rand(rng, B*C*H*W, 1)
	r := gradcheck.Rand(rng, B*E, 1)
	feat := make([]float32, B*E)
	loss := func() float64 { e.AttnPool(feat, x, B, C, H, W); return gradcheck.Dot(feat, r) }
	loss()
	dx := make([]float32, len(x))
	e.AttnPoolBackward(dx, r)
	if err := gradcheck.Check("x", x, dx, loss, 1e-2, 2e-2, len(x), rng); err != nil {
		t.Fatal(err)
	}
}
