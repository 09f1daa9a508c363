// Package testmodel writes small random CLIP models for tests: a model folder
// with model.safetensors (OpenAI names) and a BPE vocabulary learned from the
// generated world's class prompts, loadable by the ordinary loaders.
package testmodel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/tokenizer"
	"github.com/pfedmma/pfedmma/world"
)

// Write creates the model folder dir: a 3-block, width-64 CLIP at 32 px with
// the given text context, random weights from seed.
func Write(dir string, context int, seed uint64) error {
	w, err := world.New(world.DefaultConfig())
	if err != nil {
		return err
	}
	var corpus []string
	for _, c := range w.Classes() {
		corpus = append(corpus, "a photo of a "+c.Name()+".")
	}
	tok := tokenizer.FromMerges(tokenizer.Learn(corpus, 80))
	if err := tok.WriteBPEGz(filepath.Join(dir, "bpe_simple_vocab_16e6.txt.gz")); err != nil {
		return err
	}
	cfg := clip.Config{EmbedDim: 32,
		Vision: clip.VisionConfig{ImageSize: 32, PatchSize: 8, Width: 64, Layers: 3, Heads: 1, MLPWidth: 256},
		Text:   clip.TextConfig{ContextLength: context, VocabSize: tok.VocabSize(), Width: 64, Layers: 3, Heads: 1, MLPWidth: 256}}
	return checkpoint.Save(filepath.Join(dir, "model.safetensors"), clip.Random(cfg, seed), checkpoint.OpenAI)
}

// WriteResNet creates the model folder dir with a small random ResNet CLIP
// (OpenAI names, BatchNorm statistics): stem width 8, one bottleneck per
// stage, 64 px, 32-d features, and the text tower and vocabulary of Write.
func WriteResNet(dir string, context int, seed uint64) error {
	if err := Write(dir, context, seed); err != nil {
		return err
	}
	path := filepath.Join(dir, "model.safetensors")
	f, err := safetensors.Open(path)
	if err != nil {
		return err
	}
	all, err := f.Float32All()
	f.Close()
	if err != nil {
		return err
	}
	named := tensor.Named{}
	for k, v := range all {
		if !strings.HasPrefix(k, "visual.") {
			named[k] = v
		}
	}
	r := rand.New(rand.NewPCG(seed, 77))
	rnd := func(scale float64, shape ...int) *tensor.Tensor {
		t := tensor.New(shape...)
		for i := range t.Data {
			t.Data[i] = float32(r.NormFloat64() * scale)
		}
		return t
	}
	bn := func(name string, c int) {
		named[name+".weight"] = rnd(0.1, c)
		for i := range named[name+".weight"].Data {
			named[name+".weight"].Data[i] += 1
		}
		named[name+".bias"] = rnd(0.1, c)
		named[name+".running_mean"] = rnd(0.1, c)
		v := tensor.New(c)
		for i := range v.Data {
			v.Data[i] = float32(0.5 + r.Float64())
		}
		named[name+".running_var"] = v
	}
	conv := func(name string, cout, cin, k int) {
		named[name] = rnd(1/math.Sqrt(float64(cin*k*k)), cout, cin, k, k)
	}
	const w = 8
	conv("visual.conv1.weight", w/2, 3, 3)
	bn("visual.bn1", w/2)
	conv("visual.conv2.weight", w/2, w/2, 3)
	bn("visual.bn2", w/2)
	conv("visual.conv3.weight", w, w/2, 3)
	bn("visual.bn3", w)
	in := w
	for s := 0; s < 4; s++ {
		planes := w << s
		p := fmt.Sprintf("visual.layer%d.0.", s+1)
		conv(p+"conv1.weight", planes, in, 1)
		bn(p+"bn1", planes)
		conv(p+"conv2.weight", planes, planes, 3)
		bn(p+"bn2", planes)
		conv(p+"conv3.weight", 4*planes, planes, 1)
		bn(p+"bn3", 4*planes)
		conv(p+"downsample.0.weight", 4*planes, in, 1)
		bn(p+"downsample.1", 4*planes)
		in = 4 * planes
	}
	C := 32 * w
	named["visual.attnpool.positional_embedding"] = rnd(0.1, 5, C)
	for _, n := range []string{"q", "k", "v"} {
		named["visual.attnpool."+n+"_proj.weight"] = rnd(1/math.Sqrt(float64(C)), C, C)
		named["visual.attnpool."+n+"_proj.bias"] = rnd(0.01, C)
	}
	embed := named["text_projection"].Shape[1]
	named["visual.attnpool.c_proj.weight"] = rnd(1/math.Sqrt(float64(C)), embed, C)
	named["visual.attnpool.c_proj.bias"] = rnd(0.01, embed)
	return safetensors.Write(path, named, nil, nil)
}
