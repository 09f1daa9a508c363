package checkpoint

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

const (
	openaiFixture = "../testdata/clip-tiny/openai.safetensors"
	hfFixture     = "../testdata/clip-tiny/hf"
)

// tinyConfig is clip-tiny's architecture as stated in testdata/README.md.
var tinyConfig = clip.Config{
	EmbedDim: 64,
	Vision:   clip.VisionConfig{ImageSize: 32, PatchSize: 8, Width: 128, Layers: 4, Heads: 2, MLPWidth: 512},
	Text:     clip.TextConfig{ContextLength: 77, VocabSize: 1000, Width: 128, Layers: 4, Heads: 2, MLPWidth: 512},
}

// smallConfig is an odd-sized model: heads that are not width/64, towers of
// different depth and width, a non-square-friendly vocabulary.
var smallConfig = clip.Config{
	EmbedDim: 24,
	Vision:   clip.VisionConfig{ImageSize: 48, PatchSize: 16, Width: 48, Layers: 3, Heads: 3, MLPWidth: 80},
	Text:     clip.TextConfig{ContextLength: 10, VocabSize: 50, Width: 32, Layers: 2, Heads: 4, MLPWidth: 64},
}

func randomWeights(t *testing.T, cfg clip.Config, seed uint64) *clip.Weights {
	t.Helper()
	w := alloc(cfg)
	rng := rand.New(rand.NewPCG(seed, 7))
	for _, p := range layout(cfg, OpenAI, w, nil) {
		for i := range p.dst {
			p.dst[i] = float32(rng.NormFloat64())
		}
	}
	w.LogitScale = 4.5
	if err := Validate(w); err != nil {
		t.Fatal(err)
	}
	return w
}

// fileShapes lists a safetensors file's tensors and shapes.
func fileShapes(t *testing.T, path string) map[string][]int {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]int{}
	for _, n := range f.Names() {
		_, shape, _ := f.Info(n)
		out[n] = shape
	}
	return out
}

func TestFixturesAgree(t *testing.T) {
	a, ia, err := Load(openaiFixture)
	if err != nil {
		t.Fatal(err)
	}
	b, ib, err := Load(hfFixture)
	if err != nil {
		t.Fatal(err)
	}
	if err := Equal(a, b); err != nil {
		t.Errorf("OpenAI and HF fixtures load to different weights: %v", err)
	}
	for _, c := range []struct {
		info   *Info
		w      *clip.Weights
		scheme Scheme
		file   string
	}{
		{ia, a, OpenAI, openaiFixture},
		{ib, b, HF, filepath.Join(hfFixture, "model.safetensors")},
	} {
		if c.info.Scheme != c.scheme {
			t.Errorf("%s: scheme %s, want %s", c.file, c.info.Scheme, c.scheme)
		}
		if c.w.Config != tinyConfig || c.info.Config != tinyConfig {
			t.Errorf("%s: config %s, want %s", c.file, describe(c.w.Config), describe(tinyConfig))
		}
		if c.w.LogitScale != 4 || c.info.LogitScale != 4 {
			t.Errorf("%s: logit scale %g, want 4", c.file, c.w.LogitScale)
		}
		// The parameter count equals the stored element count.
		var stored int64
		for _, shape := range fileShapes(t, c.file) {
			stored += int64(tensor.Numel(shape))
		}
		if c.info.Params != stored {
			t.Errorf("%s: %d params, file holds %d values", c.file, c.info.Params, stored)
		}
		if len(c.info.Files) != 1 || c.info.Files[0] != c.file {
			t.Errorf("Files = %v, want [%s]", c.info.Files, c.file)
		}
	}
	var visual int64
	for name, shape := range fileShapes(t, openaiFixture) {
		if strings.HasPrefix(name, "visual.") {
			visual += int64(tensor.Numel(shape))
		}
	}
	if v, tx := TowerParams(ia.Config); v != visual || v+tx != ia.Params {
		t.Errorf("TowerParams = %d, %d; want %d vision and a sum of %d", v, tx, visual, ia.Params)
	}
	if ib.ConfigFile != filepath.Join(hfFixture, "config.json") {
		t.Errorf("HF ConfigFile = %q", ib.ConfigFile)
	}
	// Spot-check the HF rearrangements against the raw file: k_proj is the
	// middle third of in_proj, and visual_projection is proj transposed.
	f, err := safetensors.Open(filepath.Join(hfFixture, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	k, _ := f.Float32("vision_model.encoder.layers.3.self_attn.k_proj.weight")
	d := 128
	if got, want := b.Vision.Blocks[3].InProjW[d*d+5*d+7], k.Data[5*d+7]; got != want {
		t.Errorf("k_proj[5,7]: %g, want %g", got, want)
	}
	vp, _ := f.Float32("visual_projection.weight") // [64, 128]
	if got, want := b.Vision.Proj[9*64+3], vp.Data[3*128+9]; got != want {
		t.Errorf("proj[9,3]: %g, want visual_projection.weight[3,9] %g", got, want)
	}
}

// TestNamesMatchFixtures checks that Tensors produces exactly the names and
// shapes of the reference files.
func TestNamesMatchFixtures(t *testing.T) {
	w, _, err := Load(openaiFixture)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		scheme Scheme
		file   string
	}{{OpenAI, openaiFixture}, {HF, filepath.Join(hfFixture, "model.safetensors")}} {
		named, err := Tensors(w, c.scheme)
		if err != nil {
			t.Fatal(err)
		}
		want := fileShapes(t, c.file)
		if len(named) != len(want) {
			t.Errorf("%s: %d tensors, fixture has %d", c.scheme, len(named), len(want))
		}
		for name, shape := range want {
			got, ok := named[name]
			switch {
			case !ok:
				t.Errorf("%s: no tensor %q", c.scheme, name)
			case name == "logit_scale" && len(got.Shape) == 0:
				// stored as a 0-d scalar, the fixture uses [1]
			case !tensor.SameShape(got.Shape, shape):
				t.Errorf("%s: %q shape %v, fixture %v", c.scheme, name, got.Shape, shape)
			}
		}
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name   string
		cfg    clip.Config
		scheme Scheme
		path   string
		opts   []safetensors.Option
		dtype  string
	}{
		{"tiny openai", tinyConfig, OpenAI, "tiny.safetensors", nil, "F32"},
		{"tiny hf", tinyConfig, HF, "tiny-hf", nil, "F32"},
		{"small openai", smallConfig, OpenAI, "small.safetensors", nil, "F32"},
		{"any extension", smallConfig, OpenAI, "small.weights", nil, "F32"},
		{"small hf", smallConfig, HF, "small-hf", nil, "F32"},
		{"small bf16", smallConfig, OpenAI, "small-bf16.safetensors", []safetensors.Option{safetensors.WithFloatType(safetensors.BF16)}, "BF16"},
		{"small f16 hf", smallConfig, HF, "small-f16", []safetensors.Option{safetensors.WithFloatType(safetensors.F16)}, "F16"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := randomWeights(t, c.cfg, 1)
			path := filepath.Join(dir, c.path)
			if err := Save(path, w, c.scheme, c.opts...); err != nil {
				t.Fatal(err)
			}
			got, info, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if info.Scheme != c.scheme || len(info.DTypes) != 1 || info.DTypes[0] != c.dtype {
				t.Errorf("scheme %s dtypes %v, want %s [%s]", info.Scheme, info.DTypes, c.scheme, c.dtype)
			}
			if info.Params != ParamCount(c.cfg) {
				t.Errorf("Params %d, want %d", info.Params, ParamCount(c.cfg))
			}
			want := w
			if c.dtype != "F32" {
				want = rounded(t, w, c.dtype)
			}
			if err := Equal(want, got); err != nil {
				t.Error(err)
			}
			if inf, err := Inspect(path); err != nil || inf.Config != c.cfg {
				t.Errorf("Inspect: %v, config %+v", err, inf)
			}
		})
	}
}

// rounded is w with every value rounded through a 16-bit float type.
func rounded(t *testing.T, w *clip.Weights, dtype string) *clip.Weights {
	out := alloc(w.Config)
	src := layout(w.Config, OpenAI, w, []float32{w.LogitScale})
	ls := make([]float32, 1)
	for i, p := range layout(w.Config, OpenAI, out, ls) {
		for j, v := range src[i].dst {
			if dtype == "BF16" {
				p.dst[j] = safetensors.BF16ToFloat32(safetensors.Float32ToBF16(v))
			} else {
				p.dst[j] = safetensors.HalfToFloat32(safetensors.Float32ToHalf(v))
			}
		}
	}
	out.LogitScale = ls[0]
	return out
}

func TestPrefixAndShards(t *testing.T) {
	w := randomWeights(t, smallConfig, 2)
	dir := t.TempDir()
	for _, c := range []struct {
		scheme Scheme
		prefix string
	}{{OpenAI, "module."}, {HF, "model."}, {OpenAI, "module.clip."}} {
		named, _ := Tensors(w, c.scheme)
		pre := tensor.Named{}
		for k, v := range named {
			pre[c.prefix+k] = v
		}
		path := filepath.Join(dir, "p.safetensors")
		if err := safetensors.Write(path, pre, nil, map[string]string{MetaVisionHeads: "3", MetaTextHeads: "4"}); err != nil {
			t.Fatal(err)
		}
		if c.scheme == HF {
			// Heads for HF come from config.json, which a bare file lacks.
			if _, _, err := Load(path); err == nil || !strings.Contains(err.Error(), "cannot infer vision heads") {
				t.Errorf("HF file without config.json: err %v, want cannot infer heads", err)
			}
			b, _ := json.Marshal(hfConfigOf(smallConfig))
			os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
		}
		got, info, err := Load(path)
		if err != nil {
			t.Fatalf("prefix %q: %v", c.prefix, err)
		}
		if info.Prefix != c.prefix || info.Scheme != c.scheme {
			t.Errorf("prefix %q scheme %s, want %q %s", info.Prefix, info.Scheme, c.prefix, c.scheme)
		}
		if err := Equal(w, got); err != nil {
			t.Error(err)
		}
		os.Remove(filepath.Join(dir, "config.json"))
	}

	// A sharded HF folder with an index.
	shards := filepath.Join(dir, "sharded")
	if err := Save(shards, w, HF); err != nil {
		t.Fatal(err)
	}
	named, _ := Tensors(w, HF)
	parts := []tensor.Named{{}, {}}
	index := map[string]map[string]string{"weight_map": {}}
	for name, v := range named {
		i := 0
		if strings.HasPrefix(name, "text") {
			i = 1
		}
		parts[i][name] = v
		index["weight_map"][name] = []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}[i]
	}
	os.Remove(filepath.Join(shards, "model.safetensors"))
	for i, p := range parts {
		if err := safetensors.Write(filepath.Join(shards, []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}[i]), p, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := json.Marshal(index)
	os.WriteFile(filepath.Join(shards, "model.safetensors.index.json"), b, 0o644)
	got, info, err := Load(shards)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Files) != 2 {
		t.Errorf("sharded: files %v", info.Files)
	}
	if err := Equal(w, got); err != nil {
		t.Error(err)
	}
}

// TestHeadsWithoutMetadata checks the width/64 rule of OpenAI files that
// carry no head counts.
func TestHeadsWithoutMetadata(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		cfg  clip.Config
		want string // error substring, "" for success
	}{
		{tinyConfig, ""},
		{smallConfig, "cannot infer vision heads: width 48"},
	} {
		w := randomWeights(t, c.cfg, 3)
		named, _ := Tensors(w, OpenAI)
		path := filepath.Join(dir, "m.safetensors")
		if err := safetensors.Write(path, named, nil, nil); err != nil {
			t.Fatal(err)
		}
		got, _, err := Load(path)
		if c.want == "" {
			if err != nil {
				t.Fatal(err)
			}
			if got.Config.Vision.Heads != c.cfg.Vision.Width/64 || got.Config.Text.Heads != c.cfg.Text.Width/64 {
				t.Errorf("heads %d/%d, want width/64", got.Config.Vision.Heads, got.Config.Text.Heads)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err %v, want %q", err, c.want)
		}
	}
}

// TestLoadErrors damages a saved model in one way per case and checks the
// error names the culprit.
func TestLoadErrors(t *testing.T) {
	w := randomWeights(t, smallConfig, 4)
	meta := map[string]string{MetaVisionHeads: "3", MetaTextHeads: "4"}
	cases := []struct {
		name   string
		scheme Scheme
		edit   func(n tensor.Named, i64 map[string]safetensors.Int64Tensor)
		want   []string
	}{
		{"missing", OpenAI, func(n tensor.Named, _ map[string]safetensors.Int64Tensor) {
			delete(n, "transformer.resblocks.1.mlp.c_fc.bias")
		}, []string{`missing tensor "transformer.resblocks.1.mlp.c_fc.bias"`, "[64]"}},
		{"extra", OpenAI, func(n tensor.Named, _ map[string]safetensors.Int64Tensor) {
			n["visual.extra_thing"] = tensor.New(3)
		}, []string{`unexpected tensor "visual.extra_thing"`, "[3]"}},
		{"misshaped", OpenAI, func(n tensor.Named, _ map[string]safetensors.Int64Tensor) {
			n["visual.transformer.resblocks.2.attn.out_proj.weight"] = tensor.New(48, 24)
		}, []string{`"visual.transformer.resblocks.2.attn.out_proj.weight": shape [48 24], want [48 48]`}},
		{"misshaped hf q", HF, func(n tensor.Named, _ map[string]safetensors.Int64Tensor) {
			n["text_model.encoder.layers.1.self_attn.q_proj.weight"] = tensor.New(32, 31)
		}, []string{`"text_model.encoder.layers.1.self_attn.q_proj.weight": shape [32 31], want [32 32]`}},
		{"embed disagrees", OpenAI, func(n tensor.Named, _ map[string]safetensors.Int64Tensor) {
			n["text_projection"] = tensor.New(32, 25)
		}, []string{`"text_projection": shape [32 25], want [32 24]`}},
		{"wrong dtype", OpenAI, func(n tensor.Named, i64 map[string]safetensors.Int64Tensor) {
			delete(n, "ln_final.bias")
			i64["ln_final.bias"] = safetensors.Int64Tensor{Shape: []int{32}, Data: make([]int64, 32)}
		}, []string{`"ln_final.bias": dtype I64`}},
		{"block gap", OpenAI, func(n tensor.Named, _ map[string]safetensors.Int64Tensor) {
			for k := range n {
				if strings.HasPrefix(k, "visual.transformer.resblocks.1.") {
					delete(n, k)
				}
			}
		}, []string{"block 1 is missing"}},
		{"no anchor", OpenAI, func(n tensor.Named, _ map[string]safetensors.Int64Tensor) {
			delete(n, "visual.conv1.weight")
		}, []string{`no "visual.conv1.weight"`}},
		{"bad conv", OpenAI, func(n tensor.Named, _ map[string]safetensors.Int64Tensor) {
			n["visual.conv1.weight"] = tensor.New(48, 3, 16)
		}, []string{`"visual.conv1.weight": shape [48 3 16], want [width 3 patch patch]`}},
		{"pos not square", HF, func(n tensor.Named, _ map[string]safetensors.Int64Tensor) {
			n["vision_model.embeddings.position_embedding.weight"] = tensor.New(8, 48)
		}, []string{`"vision_model.embeddings.position_embedding.weight": shape [8 48]`, "square"}},
		{"two towers", OpenAI, func(n tensor.Named, _ map[string]safetensors.Int64Tensor) {
			n["vision_model.embeddings.patch_embedding.weight"] = tensor.New(48, 3, 16, 16)
		}, []string{"2 CLIP vision towers"}},
		{"position_ids allowed only in hf", OpenAI, func(n tensor.Named, _ map[string]safetensors.Int64Tensor) {
			n["text_model.embeddings.position_ids"] = tensor.New(1, 10)
		}, []string{`unexpected tensor "text_model.embeddings.position_ids"`}},
	}
	dir := t.TempDir()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			named, _ := Tensors(w, c.scheme)
			i64 := map[string]safetensors.Int64Tensor{}
			c.edit(named, i64)
			path := filepath.Join(dir, c.name+".safetensors")
			if c.scheme == HF {
				path = filepath.Join(dir, "case"+string(rune('a'+i)))
				if err := Save(path, w, HF); err != nil {
					t.Fatal(err)
				}
				path = filepath.Join(path, "model.safetensors")
			}
			if err := safetensors.Write(path, named, i64, meta); err != nil {
				t.Fatal(err)
			}
			_, _, err := Load(path)
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrMismatch) {
				t.Errorf("error %v is not ErrMismatch", err)
			}
			for _, s := range c.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
	// position_ids buffers in an HF checkpoint are ignored.
	hfDir := filepath.Join(dir, "hf-ids")
	if err := Save(hfDir, w, HF); err != nil {
		t.Fatal(err)
	}
	named, _ := Tensors(w, HF)
	ids := map[string]safetensors.Int64Tensor{"text_model.embeddings.position_ids": {Shape: []int{1, 10}, Data: make([]int64, 10)}}
	if err := safetensors.Write(filepath.Join(hfDir, "model.safetensors"), named, ids, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(hfDir); err != nil {
		t.Errorf("HF with position_ids: %v", err)
	}
}

func TestConfigMismatch(t *testing.T) {
	w := randomWeights(t, smallConfig, 5)
	dir := filepath.Join(t.TempDir(), "hf")
	if err := Save(dir, w, HF); err != nil {
		t.Fatal(err)
	}
	c := hfConfigOf(smallConfig)
	bad := 7
	c.VisionConfig.NumHiddenLayers = &bad
	b, _ := json.Marshal(c)
	os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
	_, _, err := Load(dir)
	if err == nil || !strings.Contains(err.Error(), "vision_config.num_hidden_layers is 7 but the tensor shapes give 3") {
		t.Errorf("err %v", err)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte("{"), 0o644)
	if _, _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("bad JSON config: err %v", err)
	}
	// open_clip config: heads and activation.
	oc := filepath.Join(t.TempDir(), "oc")
	os.Mkdir(oc, 0o755)
	named, _ := Tensors(w, OpenAI)
	if err := safetensors.Write(filepath.Join(oc, "open_clip_model.safetensors"), named, nil, nil); err != nil {
		t.Fatal(err)
	}
	cfgJSON := `{"model_cfg": {"embed_dim": 24, "vision_cfg": {"image_size": 48, "layers": 3, "width": 48, "patch_size": 16, "head_width": 16},
		"text_cfg": {"context_length": 10, "vocab_size": 50, "width": 32, "heads": 4, "layers": 2}}}`
	os.WriteFile(filepath.Join(oc, "open_clip_config.json"), []byte(cfgJSON), 0o644)
	got, info, err := Load(oc)
	if err != nil {
		t.Fatal(err)
	}
	if got.Config != smallConfig || info.Activation != "gelu" {
		t.Errorf("open_clip: config %s activation %q, want %s gelu", describe(got.Config), info.Activation, describe(smallConfig))
	}
}

func TestPathErrors(t *testing.T) {
	dir := t.TempDir()
	pt := filepath.Join(dir, "model.pt")
	os.WriteFile(pt, []byte("PK"), 0o644)
	empty := filepath.Join(dir, "empty")
	os.Mkdir(empty, 0o755)
	two := filepath.Join(dir, "two")
	os.Mkdir(two, 0o755)
	os.WriteFile(filepath.Join(two, "a.safetensors"), nil, 0o644)
	os.WriteFile(filepath.Join(two, "b.safetensors"), nil, 0o644)
	cases := []struct{ path, want string }{
		{filepath.Join(dir, "nope.safetensors"), "no such file"},
		{pt, "not a PyTorch zip archive"},
		{empty, "no .safetensors file"},
		{two, "2 .safetensors files"},
		{filepath.Join(two, "a.safetensors"), "truncated"},
	}
	for _, c := range cases {
		if _, _, err := Load(c.path); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
			t.Errorf("Load(%s): err %v, want %q and the path", c.path, err, c.want)
		}
	}
}

// TestTruncatedNoPanic cuts a saved model at many points; each load must
// fail cleanly.
func TestTruncatedNoPanic(t *testing.T) {
	w := randomWeights(t, smallConfig, 6)
	dir := t.TempDir()
	full := filepath.Join(dir, "full.safetensors")
	if err := Save(full, w, OpenAI); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(full)
	rng := rand.New(rand.NewPCG(9, 9))
	cuts := []int{0, 4, 8, 9, 100, len(data) - 1}
	for range 20 {
		cuts = append(cuts, rng.IntN(len(data)))
	}
	sort.Ints(cuts)
	cut := filepath.Join(dir, "cut.safetensors")
	for _, n := range cuts {
		os.WriteFile(cut, data[:n], 0o644)
		if _, _, err := Load(cut); err == nil {
			t.Errorf("file cut at %d of %d bytes loaded", n, len(data))
		} else if !strings.Contains(err.Error(), cut) {
			t.Errorf("cut at %d: error %q does not name the file", n, err)
		}
	}
}

// TestParamCountReleased compares with the published sizes of OpenAI's
// released models.
func TestParamCountReleased(t *testing.T) {
	vit := func(img, patch, width, layers int) clip.VisionConfig {
		return clip.VisionConfig{ImageSize: img, PatchSize: patch, Width: width, Layers: layers, Heads: width / 64, MLPWidth: 4 * width}
	}
	text := func(width int) clip.TextConfig {
		return clip.TextConfig{ContextLength: 77, VocabSize: 49408, Width: width, Layers: 12, Heads: width / 64, MLPWidth: 4 * width}
	}
	cases := []struct {
		name string
		cfg  clip.Config
		want int64
	}{
		{"ViT-B/32", clip.Config{EmbedDim: 512, Vision: vit(224, 32, 768, 12), Text: text(512)}, 151277313},
		{"ViT-B/16", clip.Config{EmbedDim: 512, Vision: vit(224, 16, 768, 12), Text: text(512)}, 149620737},
		{"ViT-L/14", clip.Config{EmbedDim: 768, Vision: vit(224, 14, 1024, 24), Text: text(768)}, 427616513},
	}
	for _, c := range cases {
		if got := ParamCount(c.cfg); got != c.want {
			t.Errorf("%s: %d params, want %d", c.name, got, c.want)
		}
		if err := checkConfig(c.cfg); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func TestValidateAndEqual(t *testing.T) {
	a := randomWeights(t, smallConfig, 8)
	b := randomWeights(t, smallConfig, 8)
	if err := Equal(a, b); err != nil {
		t.Fatal(err)
	}
	b.Text.Blocks[1].FcB[3] += 1
	if err := Equal(a, b); err == nil || !strings.Contains(err.Error(), `"transformer.resblocks.1.mlp.c_fc.bias" differs at 3`) {
		t.Errorf("Equal: %v", err)
	}
	b = randomWeights(t, smallConfig, 8)
	b.LogitScale = float32(math.NaN())
	if err := Equal(a, b); err == nil || !strings.Contains(err.Error(), "logit_scale") {
		t.Errorf("Equal with a different logit scale: %v", err)
	}
	b.Vision.Blocks = b.Vision.Blocks[:2]
	if err := Validate(b); err == nil || !strings.Contains(err.Error(), "2 vision blocks") {
		t.Errorf("Validate: %v", err)
	}
	b = randomWeights(t, smallConfig, 8)
	b.Vision.Proj = b.Vision.Proj[1:]
	if err := Save(filepath.Join(t.TempDir(), "x.safetensors"), b, OpenAI); err == nil || !strings.Contains(err.Error(), `"visual.proj"`) {
		t.Errorf("Save of a short slice: %v", err)
	}
}
