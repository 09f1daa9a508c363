package prompt

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/optim"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
)

// Learner is what the fixture-replay helpers need from a prompt method's
// learner (promptfl.Learner, fedpgp.Learner).
type Learner interface {
	// Params returns the live parameters by reference name.
	Params() tensor.Named
	// Grads returns the gradients of the last Step, by the same names.
	Grads() tensor.Named
	// Shared reports whether a parameter is averaged by the server.
	Shared(name string) bool
	// Step computes the loss of a batch of image features [B, E] and
	// overwrites the gradients.
	Step(imgFeat []float32, labels []int) (float64, map[string]float64, []float32, error)
}

// ReadFile reads every tensor of a safetensors file and its metadata.
// Integer tensors (labels, token ids) are returned as float32 holding the
// integers (exact below 2^24), the layout StepFromFile-style functions take.
func ReadFile(path string) (tensor.Named, map[string]string, error) {
	f, err := safetensors.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	out := make(tensor.Named)
	for _, name := range f.Names() {
		dt, shape, _ := f.Info(name)
		if dt != "I64" && dt != "I32" {
			t, err := f.Float32(name)
			if err != nil {
				return nil, nil, err
			}
			out[name] = t
			continue
		}
		v, _, err := f.Int64(name)
		if err != nil {
			return nil, nil, err
		}
		t := tensor.New(shape...)
		for i, x := range v {
			if x < -(1<<24) || x > 1<<24 {
				return nil, nil, fmt.Errorf("safetensors %s: tensor %q: value %d does not fit a float32 exactly", path, name, x)
			}
			t.Data[i] = float32(x)
		}
		out[name] = t
	}
	return out, f.Metadata(), nil
}

// Ints returns the integer values of batch[name] (float32 holding integers).
func Ints(batch tensor.Named, name string) ([]int, error) {
	t, ok := batch[name]
	if !ok {
		return nil, fmt.Errorf("tensor %q is missing", name)
	}
	out := make([]int, len(t.Data))
	for i, v := range t.Data {
		if v != float32(math.Trunc(float64(v))) {
			return nil, fmt.Errorf("tensor %q: value %v at %d is not an integer", name, v, i)
		}
		out[i] = int(v)
	}
	return out, nil
}

// MetaFloat parses metadata key as a number.
func MetaFloat(meta map[string]string, key string) (float64, error) {
	s, ok := meta[key]
	if !ok {
		return 0, fmt.Errorf("metadata %q is missing", key)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("metadata %q: %w", key, err)
	}
	return v, nil
}

// MetaInt parses metadata key as an integer.
func MetaInt(meta map[string]string, key string) (int, error) {
	s, ok := meta[key]
	if !ok {
		return 0, fmt.Errorf("metadata %q is missing", key)
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("metadata %q: %w", key, err)
	}
	return v, nil
}

// MetaBool parses metadata key as a boolean ("True"/"False" as Python
// writes them, or Go's forms); def is returned when the key is absent.
func MetaBool(meta map[string]string, key string, def bool) (bool, error) {
	s, ok := meta[key]
	if !ok {
		return def, nil
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("metadata %q: %w", key, err)
	}
	return v, nil
}

// MetaPosition reads CoOp's class-token position from metadata key
// "class_token_position": "end" when absent, an error naming the key when
// it is not end, middle or front.
func MetaPosition(meta map[string]string) (string, error) {
	s, ok := meta["class_token_position"]
	if !ok {
		return PositionEnd, nil
	}
	if err := CheckPosition(s); err != nil {
		return "", fmt.Errorf("metadata %w", err)
	}
	return s, nil
}

// Hyper are the optimizer and round settings of a fixture file.
type Hyper struct {
	LR, Momentum, WeightDecay float64
	LogitScale                float64 // log of the logit multiplier
	BatchSize, LocalEpochs    int     // rounds only
	ClientSizes               []int   // rounds only
}

// ReadHyper reads lr, momentum, weight_decay and logit_scale, and with round
// set batch_size, local_epochs and client_sizes (a JSON list).
func ReadHyper(meta map[string]string, round bool) (Hyper, error) {
	var h Hyper
	var err error
	for key, dst := range map[string]*float64{"lr": &h.LR, "momentum": &h.Momentum, "weight_decay": &h.WeightDecay, "logit_scale": &h.LogitScale} {
		if *dst, err = MetaFloat(meta, key); err != nil {
			return h, err
		}
	}
	if !round {
		return h, nil
	}
	if h.BatchSize, err = MetaInt(meta, "batch_size"); err != nil {
		return h, err
	}
	if h.LocalEpochs, err = MetaInt(meta, "local_epochs"); err != nil {
		return h, err
	}
	if err := json.Unmarshal([]byte(meta["client_sizes"]), &h.ClientSizes); err != nil {
		return h, fmt.Errorf("metadata %q: %w", "client_sizes", err)
	}
	if h.BatchSize < 1 || h.LocalEpochs < 1 || len(h.ClientSizes) == 0 {
		return h, fmt.Errorf("metadata: batch_size %d, local_epochs %d, %d clients: all must be positive", h.BatchSize, h.LocalEpochs, len(h.ClientSizes))
	}
	return h, nil
}

// OptimParams lists params with their gradients for an optimizer, in sorted
// name order.
func OptimParams(params, grads tensor.Named) []optim.Param {
	var out []optim.Param
	for _, name := range slices.Sorted(maps.Keys(params)) {
		out = append(out, optim.Param{Name: name, Value: params[name].Data, Grad: grads[name].Data})
	}
	return out
}

// Load copies src into the parameters dst (same names and shapes; every
// tensor of dst must be present in src).
func Load(dst, src tensor.Named) error {
	for _, name := range slices.Sorted(maps.Keys(dst)) {
		s, ok := src[name]
		if !ok {
			return fmt.Errorf("parameter %q is missing", name)
		}
		if !tensor.SameShape(s.Shape, dst[name].Shape) {
			return fmt.Errorf("parameter %q: shape %v, want %v", name, s.Shape, dst[name].Shape)
		}
		copy(dst[name].Data, s.Data)
	}
	return nil
}

// ImageFeatures returns the batch's image features [B, E]: the tensor
// prefix+"image_features" when present, else the frozen image encoder of m
// on prefix+"images" [B, 3, S, S].
func ImageFeatures(m *clip.Model, batch tensor.Named, prefix string) ([]float32, int, error) {
	if t, ok := batch[prefix+"image_features"]; ok && len(t.Shape) == 2 {
		return t.Data, t.Shape[0], nil
	}
	t, ok := batch[prefix+"images"]
	if !ok {
		return nil, 0, fmt.Errorf("tensor %q is missing", prefix+"images")
	}
	S := m.W.Config.Vision.ImageSize
	if len(t.Shape) != 4 || t.Shape[1] != 3 || t.Shape[2] != S || t.Shape[3] != S {
		return nil, 0, fmt.Errorf("tensor %q: shape %v, want [B, 3, %d, %d]", prefix+"images", t.Shape, S, S)
	}
	return m.EncodeImage(t.Data, t.Shape[0]), t.Shape[0], nil
}

// ImagePrefixes returns batch with batch[pre+"images"] [B, 3, S, S] joined
// by batch[pre+"image_features"]: the frozen ln_pre prefixes of m as
// [B, T0·Dv] records, the image records of learners that prompt the image
// encoder (MaPLe, PromptSRC). batch itself is not changed.
func ImagePrefixes(m *clip.Model, batch tensor.Named, pre string) (tensor.Named, error) {
	t, ok := batch[pre+"images"]
	if !ok {
		return nil, fmt.Errorf("tensor %q is missing", pre+"images")
	}
	S := m.W.Config.Vision.ImageSize
	if len(t.Shape) != 4 || t.Shape[1] != 3 || t.Shape[2] != S || t.Shape[3] != S {
		return nil, fmt.Errorf("tensor %q: shape %v, want [B, 3, %d, %d]", pre+"images", t.Shape, S, S)
	}
	B := t.Shape[0]
	x := clip.ImagePrefix(m, 1, t.Data, B, nil)
	out := tensor.Named{}
	for k, v := range batch {
		out[k] = v
	}
	out[pre+"image_features"] = &tensor.Tensor{Shape: []int{B, len(x) / B}, Data: x}
	return out, nil
}

// Scalar wraps v as a [1] tensor.
func Scalar(v float64) *tensor.Tensor {
	return &tensor.Tensor{Shape: []int{1}, Data: []float32{float32(v)}}
}

// StepOnce runs one Step of l on a batch and one step of a fresh SGD with
// h's settings; it returns the outputs in fixture layout: "loss", every term,
// "logits", "grad.<p>" and "step1.<p>".
func StepOnce(l Learner, img []float32, labels []int, h Hyper) (tensor.Named, error) {
	loss, terms, logits, err := l.Step(img, labels)
	if err != nil {
		return nil, err
	}
	out := tensor.Named{"loss": Scalar(loss)}
	for k, v := range terms {
		out[k] = Scalar(v)
	}
	B := len(labels)
	out["logits"] = &tensor.Tensor{Shape: []int{B, len(logits) / B}, Data: slices.Clone(logits)}
	for name, g := range l.Grads() {
		out["grad."+name] = g.Clone()
	}
	step, err := SGDOnce(l, h)
	if err != nil {
		return nil, err
	}
	maps.Copy(out, step)
	return out, nil
}

// SGDOnce applies one step of a fresh SGD with h's settings to l's
// parameters from the gradients in place and returns the new values as
// "step1.<p>".
func SGDOnce(l Learner, h Hyper) (tensor.Named, error) {
	if err := optim.NewSGD(h.Momentum, h.WeightDecay, false).Step(h.LR, OptimParams(l.Params(), l.Grads())); err != nil {
		return nil, err
	}
	out := tensor.Named{}
	for name, p := range l.Params() {
		out["step1."+name] = p.Clone()
	}
	return out, nil
}

// Round replays one federated round in fixture layout: for each client k
// (len(h.ClientSizes) of them) the learner starts from init, trains
// h.LocalEpochs epochs over its batch tensors "clientK.images" (or
// "clientK.image_features") and "clientK.labels" in stored order in batches
// of h.BatchSize with a fresh SGD; the outputs are "clientK.batch_losses",
// "clientK.trained.<p>" and "global.<p>" for the shared parameters
// (weighted by n_k / Σ n).
func Round(m *clip.Model, l Learner, init, batch tensor.Named, h Hyper) (tensor.Named, error) {
	out := tensor.Named{}
	var total float64
	for _, n := range h.ClientSizes {
		total += float64(n)
	}
	var shared []string
	for _, name := range slices.Sorted(maps.Keys(l.Params())) {
		if l.Shared(name) {
			shared = append(shared, name)
			out["global."+name] = tensor.New(l.Params()[name].Shape...)
		}
	}
	for k, n := range h.ClientSizes {
		pre := fmt.Sprintf("client%d.", k)
		img, B, err := ImageFeatures(m, batch, pre)
		if err != nil {
			return nil, err
		}
		labels, err := Ints(batch, pre+"labels")
		if err != nil {
			return nil, err
		}
		if len(labels) != B {
			return nil, fmt.Errorf("%slabels: %d labels for %d images", pre, len(labels), B)
		}
		if err := Load(l.Params(), init); err != nil {
			return nil, err
		}
		E := len(img) / B
		opt := optim.NewSGD(h.Momentum, h.WeightDecay, false)
		var losses []float32
		for ep := 0; ep < h.LocalEpochs; ep++ {
			for lo := 0; lo < B; lo += h.BatchSize {
				hi := min(lo+h.BatchSize, B)
				loss, _, _, err := l.Step(img[lo*E:hi*E], labels[lo:hi])
				if err != nil {
					return nil, fmt.Errorf("client %d batch %d: %w", k, lo/h.BatchSize, err)
				}
				losses = append(losses, float32(loss))
				if err := opt.Step(h.LR, OptimParams(l.Params(), l.Grads())); err != nil {
					return nil, fmt.Errorf("client %d: %w", k, err)
				}
			}
		}
		out[pre+"batch_losses"] = &tensor.Tensor{Shape: []int{len(losses)}, Data: losses}
		for name, p := range l.Params() {
			out[pre+"trained."+name] = p.Clone()
		}
		wk := float32(float64(n) / total)
		for _, name := range shared {
			g := out["global."+name].Data
			for i, v := range l.Params()[name].Data {
				g[i] += wk * v
			}
		}
	}
	return out, nil
}

// Loader is a prompt method's learner as Replay builds it: its live
// parameters by reference name.
type Loader interface {
	Params() tensor.Named
}

// Replay is how a prompt method's learner is rebuilt from a reference
// fixture file (the step and round files of testdata/<method>/): the
// method's settings from the file's metadata, the learner on the class
// prompts "tokens" [C, Ctx], its logit scale and its parameters from the
// file. ReplayStep and ReplayRound run the common step and round on it.
type Replay[L Loader, C any] struct {
	// Name prefixes the errors ("promptfl: …").
	Name string
	// Config reads the method's settings from the metadata.
	Config func(meta map[string]string) (C, error)
	// New builds the learner on the class prompts tokens [C, Ctx].
	New func(m *clip.Model, tokens []int, cfg C) (L, error)
	// Scale sets the learner's logit scale (the log of the multiplier).
	Scale func(l L, logitScale float32)
	// Loaded, when set, runs after the parameters are loaded (an anchor
	// taken from them).
	Loaded func(l L, params tensor.Named) error
}

// Learner rebuilds the learner of a fixture file: the hyper-parameters
// (ReadHyper; round: those of a round too), the settings, the learner on
// batch's "tokens", its logit scale and params loaded into it.
func (r Replay[L, C]) Learner(m *clip.Model, params, batch tensor.Named, meta map[string]string, round bool) (L, Hyper, error) {
	var zero L
	h, err := ReadHyper(meta, round)
	if err != nil {
		return zero, h, fmt.Errorf("%s: %w", r.Name, err)
	}
	cfg, err := r.Config(meta)
	if err != nil {
		return zero, h, err
	}
	tokens, err := Ints(batch, "tokens")
	if err != nil {
		return zero, h, fmt.Errorf("%s: %w", r.Name, err)
	}
	l, err := r.New(m, tokens, cfg)
	if err != nil {
		return zero, h, err
	}
	r.Scale(l, float32(h.LogitScale))
	if err := Load(l.Params(), params); err != nil {
		return zero, h, fmt.Errorf("%s: %w", r.Name, err)
	}
	if r.Loaded != nil {
		if err := r.Loaded(l, params); err != nil {
			return zero, h, err
		}
	}
	return l, h, nil
}

// ReplayStep replays one training step in the fixture layout of a step
// file: the learner of r, the batch's image features [B, E] ("images" or
// "image_features", see ImageFeatures) and "labels" [B], then StepOnce.
// extra, when set, adds the method's own features to the outputs: it runs
// after StepOnce, the learner holding the step's forward pass and its
// parameters already stepped.
func ReplayStep[L Learner, C any](r Replay[L, C], m *clip.Model, params, batch tensor.Named, meta map[string]string,
	extra func(l L, img []float32, B int, out tensor.Named)) (tensor.Named, error) {
	l, h, err := r.Learner(m, params, batch, meta, false)
	if err != nil {
		return nil, err
	}
	img, B, err := ImageFeatures(m, batch, "")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.Name, err)
	}
	labels, err := Ints(batch, "labels")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.Name, err)
	}
	if len(labels) != B {
		return nil, fmt.Errorf("%s: %d labels for %d images", r.Name, len(labels), B)
	}
	out, err := StepOnce(l, img, labels, h)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.Name, err)
	}
	if extra != nil {
		extra(l, img, B, out)
	}
	return out, nil
}

// ReplayRound replays one federated round in the fixture layout of a round
// file with Round: every client starts from params; the outputs are
// "clientN.batch_losses", "clientN.trained.<p>" and "global.<p>" for the
// shared parameters.
func ReplayRound[L Learner, C any](r Replay[L, C], m *clip.Model, params, batch tensor.Named, meta map[string]string) (tensor.Named, error) {
	l, h, err := r.Learner(m, params, batch, meta, true)
	if err != nil {
		return nil, err
	}
	out, err := Round(m, l, params, batch, h)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.Name, err)
	}
	return out, nil
}
