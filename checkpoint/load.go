// Package checkpoint loads and saves CLIP weights (clip.Weights) in
// safetensors files, in either the OpenAI / open_clip naming or the Hugging
// Face transformers CLIPModel naming. The architecture is inferred from the
// tensor shapes, and every tensor is checked against it: a missing, extra or
// misshaped tensor is an error that names it.
//
// PyTorch checkpoints (.pt, .pth, .bin, .ckpt) are read with package
// torchpt: OpenAI's released TorchScript .pt files (fp16 weights become
// float32), torch.save'd state dicts such as Hugging Face's
// pytorch_model.bin, through a restricted unpickler that executes nothing.
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/clip/resnet"
	"github.com/pfedmma/pfedmma/internal/inputfile"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/torchpt"
)

// ErrMismatch marks a checkpoint whose tensors do not form a CLIP model:
// missing, unexpected or misshaped tensors, or an uninferable architecture.
var ErrMismatch = errors.New("checkpoint does not match the CLIP layout")

// Metadata keys written by Save into OpenAI-scheme files, so that models
// whose head count is not width/64 load back unchanged.
const (
	MetaVisionHeads = "pfedmma.vision_heads"
	MetaTextHeads   = "pfedmma.text_heads"
)

// Info describes a loaded checkpoint.
type Info struct {
	Scheme     Scheme            // naming scheme of the tensors
	Files      []string          // safetensors files read
	ConfigFile string            // config.json or open_clip_config.json used, if any
	Prefix     string            // name prefix stripped ("module.", "model.", …), if any
	DTypes     []string          // stored element types, sorted
	Tensors    int               // tensors read (ignored buffers excluded)
	Params     int64             // parameter count
	Config     clip.Config       // inferred architecture
	Activation string            // MLP activation the checkpoint declares (quick_gelu unless a config says otherwise)
	LogitScale float32           // log of the logit multiplier
	Metadata   map[string]string // "__metadata__" of the (first) file
}

// tensorFile is one weight file: a *safetensors.File or a *torchpt.File.
type tensorFile interface {
	Name() string
	Names() []string
	Info(name string) (dtype string, shape []int, ok bool)
	Float32Into(name string, dst []float32) ([]int, error)
	Metadata() map[string]string
	Close() error
}

// source is the set of tensors of a checkpoint, possibly spread over shards.
type source struct {
	path    string // what the caller asked for, for messages
	files   []tensorFile
	tensors map[string]located // by name with the prefix stripped
	prefix  string
	configs map[Scheme]string // config file for each scheme, if present
}

type located struct {
	file tensorFile
	name string // name in the file
}

func (s *source) shape(name string) ([]int, bool) {
	l, ok := s.tensors[name]
	if !ok {
		return nil, false
	}
	_, shape, _ := l.file.Info(l.name)
	return shape, true
}

// Load reads a CLIP checkpoint. path is a .safetensors file (either scheme),
// a PyTorch checkpoint (OpenAI's TorchScript .pt, or a torch.save'd state
// dict: .pt, .pth, .bin, .ckpt, or any zip archive), or a folder holding
// config.json + model.safetensors (Hugging Face, also sharded with
// model.safetensors.index.json, or pytorch_model.bin when the folder has no
// safetensors) or a single open_clip/OpenAI .safetensors file.
func Load(path string) (*clip.Weights, *Info, error) {
	src, info, err := plan(path)
	if err != nil {
		return nil, nil, err
	}
	defer src.close()
	w := alloc(info.Config)
	ls := make([]float32, 1)
	for _, p := range layout(info.Config, info.Scheme, w, ls) {
		l := src.tensors[p.name]
		if !p.transpose {
			if _, err := l.file.Float32Into(l.name, p.dst); err != nil {
				return nil, nil, fmt.Errorf("checkpoint %s: %w", path, err)
			}
			continue
		}
		tmp := make([]float32, len(p.dst))
		if _, err := l.file.Float32Into(l.name, tmp); err != nil {
			return nil, nil, fmt.Errorf("checkpoint %s: %w", path, err)
		}
		transpose2(p.dst, tmp, p.shape[0], p.shape[1])
	}
	w.LogitScale = ls[0]
	if info.Config.Vision.ResNet {
		enc, err := resnet.FromTensors(func(name string) (*tensor.Tensor, error) {
			l, ok := src.tensors[name]
			if !ok {
				return nil, fmt.Errorf("tensor %q missing", name)
			}
			_, shape, _ := l.file.Info(l.name)
			t := &tensor.Tensor{Shape: shape, Data: make([]float32, tensor.Numel(shape))}
			if _, err := l.file.Float32Into(l.name, t.Data); err != nil {
				return nil, err
			}
			return t, nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoint %s: %w: %w", path, ErrMismatch, err)
		}
		if enc.Cfg.EmbedDim != info.Config.EmbedDim {
			return nil, nil, fmt.Errorf("checkpoint %s: %w: the image tower gives %d features, the text projection %d", path, ErrMismatch, enc.Cfg.EmbedDim, info.Config.EmbedDim)
		}
		w.ResNet = enc
	}
	return w, info, nil
}

// Inspect reads only the headers of a checkpoint (see Load) and checks every
// tensor's name, shape and dtype, without reading the weights.
func Inspect(path string) (*Info, error) {
	src, info, err := plan(path)
	if err != nil {
		return nil, err
	}
	src.close()
	return info, nil
}

// plan opens a checkpoint, infers its architecture and checks its tensors.
func plan(path string) (*source, *Info, error) {
	src, err := open(path)
	if err != nil {
		return nil, nil, err
	}
	info, err := src.plan()
	if err != nil {
		src.close()
		return nil, nil, err
	}
	return src, info, nil
}

// plan is the body of the package-level plan, on an opened source.
func (s *source) plan() (*Info, error) {
	path := s.path
	scheme, err := s.detect()
	if err != nil {
		return nil, err
	}
	info := &Info{Scheme: scheme, Prefix: s.prefix, Activation: "quick_gelu"}
	for _, f := range s.files {
		info.Files = append(info.Files, f.Name())
	}
	if len(s.files) > 0 {
		info.Metadata = s.files[0].Metadata()
	}
	var cfg clip.Config
	if scheme == OpenAI && s.isResNet() {
		cfg, err = s.inferResNet(info)
	} else {
		cfg, err = s.infer(scheme, info)
	}
	if err != nil {
		return nil, err
	}
	if err := checkConfig(cfg); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w: %w", path, ErrMismatch, err)
	}
	info.Config = cfg
	if err := s.check(scheme, cfg, info); err != nil {
		return nil, err
	}
	info.Params = ParamCount(cfg)
	if cfg.Vision.ResNet {
		for name := range s.tensors {
			if strings.HasPrefix(name, "visual.") && !strings.HasSuffix(name, "num_batches_tracked") {
				shape, _ := s.shape(name)
				info.Params += int64(tensor.Numel(shape))
			}
		}
	}
	ls := make([]float32, 1)
	l := s.tensors["logit_scale"]
	if _, err := l.file.Float32Into(l.name, ls); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	info.LogitScale = ls[0]
	if info.Activation != "quick_gelu" {
		slog.Warn("checkpoint declares an activation other than CLIP's quick_gelu", "path", path, "activation", info.Activation)
	}
	return info, nil
}

// isTorch reports whether p is to be read as a PyTorch checkpoint: by its
// extension, or by the zip signature that torch.save and torch.jit.save
// write.
func isTorch(p string) bool {
	switch strings.ToLower(filepath.Ext(p)) {
	case ".pt", ".pth", ".bin", ".ckpt":
		return true
	}
	fh, err := os.Open(p)
	if err != nil {
		return false // the open proper reports it
	}
	defer fh.Close()
	var head [4]byte
	n, _ := fh.Read(head[:])
	return n == 4 && string(head[:]) == "PK\x03\x04"
}

// openFile opens one weight file in the format its name or content says.
func openFile(p string) (tensorFile, error) {
	if isTorch(p) {
		return torchpt.Open(p)
	}
	return safetensors.OpenLazy(p)
}

// open finds and opens the weight file(s) of a checkpoint.
func open(path string) (*source, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	src := &source{path: path, tensors: map[string]located{}, configs: map[Scheme]string{}}
	var files []string
	dir := path
	if !st.IsDir() {
		dir = filepath.Dir(path)
		files = []string{path}
	} else if files, err = folderFiles(path); err != nil {
		return nil, err
	}
	for scheme, name := range map[Scheme]string{HF: "config.json", OpenAI: "open_clip_config.json"} {
		if p := filepath.Join(dir, name); fileExists(p) {
			src.configs[scheme] = p
		}
	}
	for _, p := range files {
		f, err := openFile(p)
		if err != nil {
			src.close()
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		src.files = append(src.files, f)
	}
	return src, nil
}

// close releases the files of s.
func (s *source) close() {
	for _, f := range s.files {
		f.Close() // read-only: nothing to flush
	}
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// folderFiles picks the weight files of a model folder: safetensors
// (sharded or not) first, then PyTorch's pytorch_model.bin (sharded or
// not).
func folderFiles(dir string) ([]string, error) {
	for _, index := range []string{"model.safetensors.index.json", "pytorch_model.bin.index.json"} {
		if idx := filepath.Join(dir, index); fileExists(idx) {
			return shardFiles(dir, idx)
		}
	}
	for _, name := range []string{"model.safetensors", "open_clip_model.safetensors"} {
		if p := filepath.Join(dir, name); fileExists(p) {
			return []string{p}, nil
		}
	}
	found, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	switch len(found) {
	case 0:
		for _, name := range []string{"pytorch_model.bin", "open_clip_pytorch_model.bin"} {
			if p := filepath.Join(dir, name); fileExists(p) {
				return []string{p}, nil
			}
		}
		return nil, fmt.Errorf("checkpoint %s: no .safetensors file (nor pytorch_model.bin) in the folder", dir)
	case 1:
		return found, nil
	}
	return nil, fmt.Errorf("checkpoint %s: %d .safetensors files and no model.safetensors; name one", dir, len(found))
}

// shardFiles reads a sharded checkpoint's index (weight_map: tensor name →
// shard file in dir) and returns the shard files, sorted.
func shardFiles(dir, idx string) ([]string, error) {
	b, err := inputfile.ReadFile(idx)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	files, err := parseIndex(b)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", idx, err)
	}
	for i, f := range files {
		files[i] = filepath.Join(dir, f)
	}
	return files, nil
}

// parseIndex decodes a model.safetensors.index.json and returns its shard
// file names, each once, sorted. Shards must be plain file names.
func parseIndex(b []byte) ([]string, error) {
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &index); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var files []string
	for name, shard := range index.WeightMap {
		if shard == "" || shard == "." || shard == ".." || filepath.Base(shard) != shard || strings.ContainsAny(shard, `/\`) {
			return nil, fmt.Errorf("tensor %q: shard %q is not a file name in the folder", name, shard)
		}
		if !seen[shard] {
			seen[shard] = true
			files = append(files, shard)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("empty weight_map")
	}
	sort.Strings(files)
	return files, nil
}

// anchors identify a scheme by a tensor only it has.
var anchors = []struct {
	scheme Scheme
	name   string
}{
	{OpenAI, "visual.conv1.weight"},
	{HF, "vision_model.embeddings.patch_embedding.weight"},
}

// detect finds the scheme and the common name prefix, and indexes the
// tensors by their unprefixed names.
func (s *source) detect() (Scheme, error) {
	type hit struct {
		scheme Scheme
		prefix string
	}
	var hits []hit
	for _, f := range s.files {
		for _, name := range f.Names() {
			for _, a := range anchors {
				if p, ok := strings.CutSuffix(name, a.name); ok && (p == "" || strings.HasSuffix(p, ".")) {
					hits = append(hits, hit{a.scheme, p})
				}
			}
		}
	}
	switch len(hits) {
	case 0:
		return "", fmt.Errorf("checkpoint %s: %w: no %q (OpenAI/open_clip) or %q (Hugging Face) tensor",
			s.path, ErrMismatch, anchors[0].name, anchors[1].name)
	case 1:
	default:
		return "", fmt.Errorf("checkpoint %s: %w: %d CLIP vision towers (%s%s, %s%s, …)",
			s.path, ErrMismatch, len(hits), hits[0].prefix, hits[0].scheme, hits[1].prefix, hits[1].scheme)
	}
	s.prefix = hits[0].prefix
	for _, f := range s.files {
		for _, name := range f.Names() {
			key, ok := strings.CutPrefix(name, s.prefix)
			if !ok {
				_, shape, _ := f.Info(name)
				return "", fmt.Errorf("checkpoint %s: %w: unexpected tensor %q %v outside prefix %q",
					f.Name(), ErrMismatch, name, shape, s.prefix)
			}
			if prev, dup := s.tensors[key]; dup {
				return "", fmt.Errorf("checkpoint %s: %w: tensor %q in both %s and %s",
					s.path, ErrMismatch, name, prev.file.Name(), f.Name())
			}
			s.tensors[key] = located{f, name}
		}
	}
	return hits[0].scheme, nil
}

// full is the name of an unprefixed tensor as stored.
func (s *source) full(name string) string { return s.prefix + name }

// dims returns the shape of tensor name, which must have rank len(want);
// want describes the dimensions in messages.
func (s *source) dims(name string, want ...string) ([]int, error) {
	shape, ok := s.shape(name)
	if !ok {
		return nil, fmt.Errorf("checkpoint %s: %w: missing tensor %q (shape [%s])",
			s.path, ErrMismatch, s.full(name), strings.Join(want, " "))
	}
	if len(shape) != len(want) {
		return nil, fmt.Errorf("checkpoint %s: %w: tensor %q: shape %v, want [%s]",
			s.path, ErrMismatch, s.full(name), shape, strings.Join(want, " "))
	}
	for _, d := range shape {
		if d <= 0 {
			return nil, fmt.Errorf("checkpoint %s: %w: tensor %q: shape %v has an empty dimension",
				s.path, ErrMismatch, s.full(name), shape)
		}
	}
	return shape, nil
}

// layers counts the blocks named prefix+"N."+…, which must be numbered
// 0..n-1.
func (s *source) layers(prefix string) (int, error) {
	re := regexp.MustCompile("^" + regexp.QuoteMeta(prefix) + `(\d+)\.`)
	seen := map[int]bool{}
	maxIdx := -1
	for name := range s.tensors {
		m := re.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		i, err := strconv.Atoi(m[1])
		if err != nil {
			return 0, fmt.Errorf("checkpoint %s: %w: tensor %q: bad block index", s.path, ErrMismatch, s.full(name))
		}
		seen[i] = true
		maxIdx = max(maxIdx, i)
	}
	if len(seen) == 0 {
		return 0, fmt.Errorf("checkpoint %s: %w: no %s* blocks", s.path, ErrMismatch, s.full(prefix))
	}
	if maxIdx+1 != len(seen) {
		for i := range maxIdx {
			if !seen[i] {
				return 0, fmt.Errorf("checkpoint %s: %w: blocks %s* go up to %d but block %d is missing",
					s.path, ErrMismatch, s.full(prefix), maxIdx, i)
			}
		}
	}
	return len(seen), nil
}

// names are a scheme's tensor names: a name ending in '.' is a layer's,
// followed by "weight" and "bias"; vblocks and tblocks start a block's
// names, followed by its index and '.', then the block's own names (ln1 …
// mlpOut, and the attention's q/k/v, fused or not: see layouter.block).
type names struct {
	patch, pos, vproj, vblocks, tok, tpos, tproj, tblocks string
	class, lnPre, lnPost, lnFinal                         string
	ln1, attnOut, ln2, mlpIn, mlpOut                      string
	projT                                                 bool // projections stored as [embed, width]
}

var schemeNames = map[Scheme]names{
	OpenAI: {
		patch: "visual.conv1.weight", pos: "visual.positional_embedding", vproj: "visual.proj",
		vblocks: "visual.transformer.resblocks.", tok: "token_embedding.weight", tpos: "positional_embedding",
		tproj: "text_projection", tblocks: "transformer.resblocks.",
		class: "visual.class_embedding", lnPre: "visual.ln_pre.", lnPost: "visual.ln_post.", lnFinal: "ln_final.",
		ln1: "ln_1.", attnOut: "attn.out_proj.", ln2: "ln_2.", mlpIn: "mlp.c_fc.", mlpOut: "mlp.c_proj.",
	},
	HF: {
		patch: "vision_model.embeddings.patch_embedding.weight", pos: "vision_model.embeddings.position_embedding.weight",
		vproj: "visual_projection.weight", vblocks: "vision_model.encoder.layers.",
		tok: "text_model.embeddings.token_embedding.weight", tpos: "text_model.embeddings.position_embedding.weight",
		tproj: "text_projection.weight", tblocks: "text_model.encoder.layers.", projT: true,
		class: "vision_model.embeddings.class_embedding", lnPre: "vision_model.pre_layrnorm.",
		lnPost: "vision_model.post_layernorm.", lnFinal: "text_model.final_layer_norm.",
		ln1: "layer_norm1.", attnOut: "self_attn.out_proj.", ln2: "layer_norm2.", mlpIn: "mlp.fc1.", mlpOut: "mlp.fc2.",
	},
}

// infer derives the architecture from the tensor shapes, taking head
// counts (which shapes do not show) from a config file, metadata or the
// OpenAI rule width/64.
func (s *source) infer(scheme Scheme, info *Info) (clip.Config, error) {
	n := schemeNames[scheme]
	var cfg clip.Config
	conv, err := s.dims(n.patch, "width", "3", "patch", "patch")
	if err != nil {
		return cfg, err
	}
	if conv[1] != 3 || conv[2] != conv[3] {
		return cfg, fmt.Errorf("checkpoint %s: %w: tensor %q: shape %v, want [width 3 patch patch]",
			s.path, ErrMismatch, s.full(n.patch), conv)
	}
	vc := &cfg.Vision
	vc.Width, vc.PatchSize = conv[0], conv[2]
	pos, err := s.dims(n.pos, "tokens", "width")
	if err != nil {
		return cfg, err
	}
	grid := gridSide(pos[0])
	if grid == 0 {
		return cfg, fmt.Errorf("checkpoint %s: %w: tensor %q: shape %v: %d tokens is not a square grid plus a class token",
			s.path, ErrMismatch, s.full(n.pos), pos, pos[0])
	}
	vc.ImageSize = grid * vc.PatchSize
	if vc.Layers, err = s.layers(n.vblocks); err != nil {
		return cfg, err
	}
	fc, err := s.dims(n.vblocks+"0."+n.mlpIn+"weight", "mlp", "width")
	if err != nil {
		return cfg, err
	}
	vc.MLPWidth = fc[0]
	vproj, err := s.dims(n.vproj, "width", "embed")
	if err != nil {
		return cfg, err
	}
	cfg.EmbedDim = vproj[1]
	if n.projT {
		cfg.EmbedDim = vproj[0]
	}

	tc := &cfg.Text
	if err := s.inferText(n, tc); err != nil {
		return cfg, err
	}

	vc.Heads, tc.Heads = vc.Width/64, tc.Width/64
	if scheme == OpenAI {
		if err := s.metaHeads(info.Metadata, &cfg); err != nil {
			return cfg, err
		}
	}
	if err := s.applyConfig(scheme, &cfg, info); err != nil {
		return cfg, err
	}
	for _, h := range []struct {
		tower      string
		width, got int
	}{{"vision", vc.Width, vc.Heads}, {"text", tc.Width, tc.Heads}} {
		if h.got <= 0 || h.width%h.got != 0 {
			return cfg, fmt.Errorf("checkpoint %s: %w: cannot infer %s heads: width %d is not a multiple of 64 and no config gives them",
				s.path, ErrMismatch, h.tower, h.width)
		}
	}
	return cfg, nil
}

// inferText reads the text tower's vocabulary, width, context length,
// layers and MLP width from its tensors' shapes (names n).
func (s *source) inferText(n names, tc *clip.TextConfig) error {
	tok, err := s.dims(n.tok, "vocab", "width")
	if err != nil {
		return err
	}
	tc.VocabSize, tc.Width = tok[0], tok[1]
	tpos, err := s.dims(n.tpos, "context", "width")
	if err != nil {
		return err
	}
	tc.ContextLength = tpos[0]
	if tc.Layers, err = s.layers(n.tblocks); err != nil {
		return err
	}
	fc, err := s.dims(n.tblocks+"0."+n.mlpIn+"weight", "mlp", "width")
	if err != nil {
		return err
	}
	tc.MLPWidth = fc[0]
	return nil
}

// isResNet reports whether an OpenAI-named checkpoint has CLIP's ResNet
// image tower (ModifiedResNet) instead of a ViT.
func (s *source) isResNet() bool {
	_, ok := s.tensors["visual.layer1.0.conv1.weight"]
	return ok
}

// gridSide is the side of the square grid of tokens−1 patches (one token,
// the class token or the pool's mean, besides), or 0 when tokens−1 is not a
// positive square.
func gridSide(tokens int) int {
	grid := 0
	for grid*grid < tokens-1 {
		grid++
	}
	if grid*grid != tokens-1 {
		return 0
	}
	return grid
}

// inferResNet infers a ResNet CLIP's configuration: the text tower as for
// a ViT, the image size from the attention pool's grid (as CLIP's
// build_model), the embedding from the text projection.
func (s *source) inferResNet(info *Info) (clip.Config, error) {
	var cfg clip.Config
	pos, err := s.dims("visual.attnpool.positional_embedding", "tokens", "width")
	if err != nil {
		return cfg, err
	}
	grid := gridSide(pos[0])
	if grid == 0 {
		return cfg, fmt.Errorf("checkpoint %s: %w: tensor %q: %d tokens is not a square grid plus one", s.path, ErrMismatch, "visual.attnpool.positional_embedding", pos[0])
	}
	cfg.Vision = clip.VisionConfig{ResNet: true, ImageSize: 32 * grid}
	tc := &cfg.Text
	tok, err := s.dims("token_embedding.weight", "vocab", "width")
	if err != nil {
		return cfg, err
	}
	tc.VocabSize, tc.Width = tok[0], tok[1]
	tpos, err := s.dims("positional_embedding", "context", "width")
	if err != nil {
		return cfg, err
	}
	tc.ContextLength = tpos[0]
	if tc.Layers, err = s.layers("transformer.resblocks."); err != nil {
		return cfg, err
	}
	fc, err := s.dims("transformer.resblocks.0.mlp.c_fc.weight", "mlp", "width")
	if err != nil {
		return cfg, err
	}
	tc.MLPWidth = fc[0]
	tproj, err := s.dims("text_projection", "width", "embed")
	if err != nil {
		return cfg, err
	}
	cfg.EmbedDim = tproj[1]
	tc.Heads = tc.Width / 64
	if err := s.metaHeads(info.Metadata, &cfg); err != nil {
		return cfg, err
	}
	if tc.Heads <= 0 || tc.Width%tc.Heads != 0 {
		return cfg, fmt.Errorf("checkpoint %s: %w: cannot infer text heads: width %d is not a multiple of 64", s.path, ErrMismatch, tc.Width)
	}
	return cfg, nil
}

// check compares every tensor with the layout of cfg.
func (s *source) check(scheme Scheme, cfg clip.Config, info *Info) error {
	var problems []string
	used := map[string]bool{}
	dtypes := map[string]bool{}
	for _, p := range layout(cfg, scheme, nil, nil) {
		l, ok := s.tensors[p.name]
		if !ok {
			problems = append(problems, fmt.Sprintf("missing tensor %q (shape %v)", s.full(p.name), p.shape))
			continue
		}
		used[p.name] = true
		dt, shape, _ := l.file.Info(l.name)
		dtypes[dt] = true
		want := p.shape
		if p.name == "logit_scale" && tensor.SameShape(shape, []int{1}) {
			want = shape // a scalar may be stored as [] or [1]
		}
		switch {
		case !tensor.SameShape(shape, want):
			problems = append(problems, fmt.Sprintf("tensor %q: shape %v, want %v", l.name, shape, want))
		case !safetensors.DType(dt).IsFloat():
			problems = append(problems, fmt.Sprintf("tensor %q: dtype %s, want F32, F16, BF16 or F64", l.name, dt))
		}
	}
	var extra []string
	for name := range s.tensors {
		if cfg.Vision.ResNet && strings.HasPrefix(name, "visual.") {
			used[name] = true // clip/resnet reads and checks the image tower
			continue
		}
		if !used[name] && !ignorable[scheme][name] {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	for _, name := range extra {
		shape, _ := s.shape(name)
		problems = append(problems, fmt.Sprintf("unexpected tensor %q (shape %v)", s.full(name), shape))
	}
	if len(problems) > 0 {
		const show = 6
		msg := strings.Join(problems[:min(show, len(problems))], "; ")
		if len(problems) > show {
			msg += fmt.Sprintf("; and %d more", len(problems)-show)
		}
		return fmt.Errorf("checkpoint %s: %w (%s architecture %s): %s", s.path, ErrMismatch, scheme, describe(cfg), msg)
	}
	info.Tensors = len(used)
	for dt := range dtypes {
		info.DTypes = append(info.DTypes, dt)
	}
	sort.Strings(info.DTypes)
	return nil
}

// describe summarises a config in one line.
func describe(c clip.Config) string {
	if c.Vision.ResNet {
		return fmt.Sprintf("ResNet %dpx, text ctx%d vocab%d w%d L%d H%d, embed %d",
			c.Vision.ImageSize, c.Text.ContextLength, c.Text.VocabSize, c.Text.Width, c.Text.Layers, c.Text.Heads, c.EmbedDim)
	}
	return fmt.Sprintf("ViT %dpx/%d w%d L%d H%d, text ctx%d vocab%d w%d L%d H%d, embed %d",
		c.Vision.ImageSize, c.Vision.PatchSize, c.Vision.Width, c.Vision.Layers, c.Vision.Heads,
		c.Text.ContextLength, c.Text.VocabSize, c.Text.Width, c.Text.Layers, c.Text.Heads, c.EmbedDim)
}
