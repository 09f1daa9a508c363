package methods

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
	"gopkg.in/yaml.v3"
)

// RoundInputs is one federated round in the reference fixtures' layout:
// every client starts from Init, trains opts.Epochs local epochs over its
// images (batches of opts.Batch in stored order when opts.InOrder), with a
// fresh optimizer, and the server aggregates.
type RoundInputs struct {
	Model   *clip.Model
	Init    tensor.Named // initial parameters, reference names
	Tokens  []int        // class prompts [C, ctx]
	Classes int
	Clients []TensorClient
	Train   train.Options
	Seed    uint64
}

// Round runs one round of method meth (settings sec) through the
// production path — its clients wrapped in federation Sites, its Strategy,
// the Coordinator — and returns the fixtures' output layout:
// "client<i>.trained.<name>" for every parameter a site keeps and
// "global.<name>" for every tensor the server holds after aggregating.
func Round(ctx context.Context, meth Method, sec config.Section, in RoundInputs) (tensor.Named, error) {
	depth, err := meth.Depth(sec, min(in.Model.W.Config.Vision.Layers, in.Model.W.Config.Text.Layers))
	if err != nil {
		return nil, err
	}
	if depth == AnyDepth {
		return nil, fmt.Errorf("%s does not train", meth.Info().Name)
	}
	env, err := TensorEnv(in.Model, depth, in.Tokens, in.Classes, in.Clients, in.Train, in.Seed)
	if err != nil {
		return nil, err
	}
	defer env.TrainStore.Close()
	env.Init = in.Init
	plan, err := meth.Build(env, sec)
	if err != nil {
		return nil, err
	}
	if plan.Strategy == nil {
		return nil, fmt.Errorf("%s does not train", meth.Info().Name)
	}
	proxies := make([]federation.ClientProxy, len(plan.Clients))
	for i, c := range plan.Clients {
		proxies[i] = federation.NewSite(c, "")
	}
	coord := &federation.Coordinator{Strategy: plan.Strategy, Proxies: proxies, Rounds: 1, Fraction: 1,
		Seed: in.Seed, NoEvaluate: true, Logger: slog.New(slog.DiscardHandler)}
	if _, err := coord.Run(ctx); err != nil {
		return nil, err
	}
	out := tensor.Named{}
	if plan.Site != nil {
		for i := range plan.Clients {
			st, err := plan.Site(i)
			if err != nil {
				return nil, err
			}
			for k, v := range st {
				out[fmt.Sprintf("client%d.trained.%s", i, k)] = v
			}
		}
	}
	if plan.Global != nil {
		for k, v := range plan.Global() {
			out["global."+k] = v
		}
	}
	return out, nil
}

// Fixture holds the inputs of `pfedmma step` and `pfedmma round` in the
// reference fixtures' layout: the parameters file (reference names), the
// batch or round file (images, labels, tokens, per-client tensors) and the
// hyper-parameters from the files' metadata with --set overrides applied.
type Fixture struct {
	Model  *clip.Model
	Params tensor.Named
	Batch  tensor.Named
	Ints   map[string][]int
	Meta   map[string]string
}

// Float reads a numeric hyper-parameter; a missing or malformed key is an
// error naming it.
func (f *Fixture) Float(key string) (float64, error) {
	v, ok := f.Meta[key]
	if !ok {
		return 0, fmt.Errorf("hyper-parameter %q missing from the metadata (give it with --set %s=…)", key, key)
	}
	x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil {
		return 0, fmt.Errorf("hyper-parameter %s=%q: %w", key, v, err)
	}
	return x, nil
}

// FloatOr reads a numeric hyper-parameter with a default.
func (f *Fixture) FloatOr(key string, def float64) (float64, error) {
	if _, ok := f.Meta[key]; !ok {
		return def, nil
	}
	return f.Float(key)
}

// Tensor returns a float tensor of the batch, or an error naming it.
func (f *Fixture) Tensor(name string) (*tensor.Tensor, error) {
	t, ok := f.Batch[name]
	if !ok {
		if _, isInt := f.Ints[name]; isInt {
			return nil, fmt.Errorf("tensor %q in the batch file is an integer tensor; want a float one (F32, F16, BF16 or F64)", name)
		}
		return nil, fmt.Errorf("tensor %q missing from the batch file", name)
	}
	return t, nil
}

// IntsOf returns an integer tensor of the batch (or the parameters file),
// or an error naming it.
func (f *Fixture) IntsOf(name string) ([]int, error) {
	v, ok := f.Ints[name]
	if !ok {
		if t, isFloat := f.Batch[name]; isFloat {
			return nil, fmt.Errorf("tensor %q in the batch file is a float tensor (shape %v); want an integer one (I64 or I32)", name, t.Shape)
		}
		return nil, fmt.Errorf("integer tensor %q missing from the batch file", name)
	}
	return v, nil
}

// TrainOptions reads the local-training keys (lr, momentum, weight_decay,
// batch_size, local_epochs): a fresh SGD per client, stored batch order.
func (f *Fixture) TrainOptions() (train.Options, error) {
	o := train.Options{Optimizer: "sgd", ResetOptimizer: true, InOrder: true}
	var err error
	get := func(key string, def float64) float64 {
		v, e := f.FloatOr(key, def)
		if e != nil && err == nil {
			err = e
		}
		return v
	}
	o.LR, o.Momentum, o.WD = get("lr", 0), get("momentum", 0), get("weight_decay", 0)
	o.Batch, o.Epochs = int(get("batch_size", 32)), int(get("local_epochs", 1))
	if err == nil && (!(o.LR > 0) || math.IsInf(o.LR, 0) || o.Batch < 1 || o.Epochs < 1 || !(o.Momentum >= 0) || !(o.WD >= 0)) {
		err = fmt.Errorf("hyper-parameters: lr %v, batch_size %d, local_epochs %d, momentum %v, weight_decay %v out of range", o.LR, o.Batch, o.Epochs, o.Momentum, o.WD)
	}
	return o, err
}

// Stepper is a method that reproduces one training step in the fixtures'
// layout: "logits", "loss" (and each loss term), "grad.<param>" and
// "step1.<param>" after one SGD step from a fresh optimizer, plus the
// features it computes, under the reference's names.
type Stepper interface {
	Step(ctx context.Context, f *Fixture) (tensor.Named, error)
}

// FixtureSettings is a method whose settings can be read from a fixture's
// metadata and parameters (n_ctx, bottleneck, adapter blocks, ...).
type FixtureSettings interface {
	SettingsFrom(f *Fixture) (config.Section, error)
}

// Rounder is a method whose fixture round is not the plain one of Round
// (pFedMoAP: the server's expert selection, then one client).
type Rounder interface {
	FixtureRound(ctx context.Context, f *Fixture) (tensor.Named, error)
}

// FixtureRound runs `pfedmma round` for meth: its own Rounder, or Round on
// the clients "client<i>.images"/"client<i>.labels" of f.Batch with the
// class prompts "tokens".
func FixtureRound(ctx context.Context, meth Method, f *Fixture) (tensor.Named, error) {
	if r, ok := meth.(Rounder); ok {
		return r.FixtureRound(ctx, f)
	}
	fs, ok := meth.(FixtureSettings)
	if !ok {
		return nil, fmt.Errorf("%s cannot read its settings from a fixture", meth.Info().Name)
	}
	sec, err := fs.SettingsFrom(f)
	if err != nil {
		return nil, err
	}
	opts, err := f.TrainOptions()
	if err != nil {
		return nil, err
	}
	tokens, err := f.IntsOf("tokens")
	if err != nil {
		return nil, err
	}
	in := RoundInputs{Model: f.Model, Init: f.Params, Tokens: tokens, Train: opts,
		Classes: len(tokens) / f.Model.W.Config.Text.ContextLength}
	for i := 0; ; i++ {
		px, ok := f.Batch[fmt.Sprintf("client%d.images", i)]
		if !ok {
			break
		}
		labels, err := f.IntsOf(fmt.Sprintf("client%d.labels", i))
		if err != nil {
			return nil, err
		}
		in.Clients = append(in.Clients, TensorClient{Pixels: px.Data, Labels: labels})
	}
	if len(in.Clients) == 0 {
		return nil, fmt.Errorf("tensor %q missing from the round file", "client0.images")
	}
	return Round(ctx, meth, sec, in)
}

// FloatBatch returns the batch with its integer tensors as float32 tensors
// holding the integers (the layout prompt.ReadFile gives).
func (f *Fixture) FloatBatch() tensor.Named {
	out := maps.Clone(f.Batch)
	for name, v := range f.Ints {
		if _, ok := out[name]; ok {
			continue
		}
		t := tensor.New(len(v))
		for i, x := range v {
			t.Data[i] = float32(x)
		}
		out[name] = t
	}
	return out
}

// LoadFixture reads the parameters and the batch files of `pfedmma step` /
// `round` and merges their metadata: the overrides sets ("key=value") over
// the first batch file over later ones over the parameters file. A tensor
// present in several files comes from the first.
func LoadFixture(m *clip.Model, params string, batches, sets []string) (*Fixture, error) {
	f := &Fixture{Model: m, Batch: tensor.Named{}, Ints: map[string][]int{}, Meta: map[string]string{}}
	var metas []map[string]string
	read := func(file string, into tensor.Named) error {
		sf, err := safetensors.Open(file)
		if err != nil {
			return err
		}
		defer sf.Close()
		for _, name := range sf.Names() {
			if _, seen := into[name]; seen {
				continue
			}
			if _, seen := f.Ints[name]; seen {
				continue
			}
			dt, _, _ := sf.Info(name)
			if dt == "I64" || dt == "I32" {
				v, _, err := sf.Int64(name)
				if err != nil {
					return err
				}
				ints := make([]int, len(v))
				for i, x := range v {
					ints[i] = int(x)
				}
				f.Ints[name] = ints
				continue
			}
			t, err := sf.Float32(name)
			if err != nil {
				return err
			}
			if i := nonFiniteAt(t.Data); i >= 0 {
				return fmt.Errorf("%s: tensor %q holds %v at index %d: inputs must be finite", file, name, t.Data[i], i)
			}
			into[name] = t
		}
		metas = append(metas, sf.Metadata())
		return nil
	}
	f.Params = tensor.Named{}
	if err := read(params, f.Params); err != nil {
		return nil, err
	}
	for _, b := range batches {
		if err := read(b, f.Batch); err != nil {
			return nil, err
		}
	}
	// params, then the batch files from the last to the first
	maps.Copy(f.Meta, metas[0])
	for _, md := range slices.Backward(metas[1:]) {
		maps.Copy(f.Meta, md)
	}
	for _, kv := range sets {
		k, v, err := config.ParseSet(kv)
		if err != nil {
			return nil, err
		}
		if _, inFile := f.Meta[k]; !inFile && !IsFixtureKey(k) {
			known := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(FixtureKeys), sectionKeys()...))))
			return nil, fmt.Errorf("--set %s: unknown hyper-parameter %q; the step and round inputs read %s (or client<i>.domain)", kv, k, strings.Join(known, ", "))
		}
		f.Meta[k] = v
	}
	for _, k := range slices.Sorted(maps.Keys(f.Meta)) {
		if x, err := strconv.ParseFloat(strings.TrimSpace(f.Meta[k]), 64); err == nil && (math.IsNaN(x) || math.IsInf(x, 0)) {
			return nil, fmt.Errorf("hyper-parameter %s=%s: not a finite number", k, f.Meta[k])
		}
	}
	if err := f.checkSizes(); err != nil {
		return nil, err
	}
	return f, nil
}

// FixtureKeys are the hyper-parameters (metadata keys) that some method's
// step or round reads; --set accepts these and the keys the input files'
// metadata already hold.
var FixtureKeys = []string{
	"adapter_dim", "adapter_end", "adapter_scale", "adapter_start", "adaln_layers", "alpha", "avg_prompt",
	"batch_size", "blocks", "bottleneck", "client", "client_sizes", "csc", "domain", "dropout", "ema", "eps",
	"gating_embed_dim", "gating_heads", "gating_lr", "gating_momentum", "gating_weight_decay", "init_std",
	"lambda", "local_epochs", "logit_scale", "lr", "max_iter", "momentum", "mu", "n_ctx", "normalize_classifier",
	"num_experts", "num_prompt", "optimizer", "ot", "prox_mu", "ratio", "reduction", "scale", "scaling", "seed",
	"selection", "tau", "temp", "thresh", "top_percent", "variant", "weight_decay",
}

// sectionKeys lists the settings of every registered method's config
// section (their YAML keys): a method's step and round read its settings
// under the names its section gives them, so a method added later needs no
// edit here.
func sectionKeys() []string {
	var out []string
	for _, m := range All() {
		sec := m.DefaultConfig()
		if sec == nil {
			continue
		}
		b, err := yaml.Marshal(sec)
		if err != nil {
			continue
		}
		var kv map[string]any
		if yaml.Unmarshal(b, &kv) != nil {
			continue
		}
		for k := range kv {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// clientKey matches the per-client names of a round file: client<i>.<rest>.
var clientKey = regexp.MustCompile(`^client(0|[1-9][0-9]{0,8})\.`)

// IsFixtureKey reports whether key is a hyper-parameter some method's step
// or round reads ([FixtureKeys], or client<i>.domain).
func IsFixtureKey(key string) bool {
	if slices.Contains(FixtureKeys, key) || slices.Contains(sectionKeys(), key) {
		return true
	}
	m := clientKey.FindString(key)
	return m != "" && key[len(m):] == "domain"
}

// nonFiniteAt returns the index of the first NaN or ±Inf in v, or -1.
func nonFiniteAt(v []float32) int {
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return i
		}
	}
	return -1
}

// checkSizes refuses empty batch tensors (a step or round on no example
// has nothing to compute) and per-client tensors whose client indices do
// not run 0, 1, 2, … without a gap (a gap would silently drop the clients
// after it).
func (f *Fixture) checkSizes() error {
	seen := map[int]string{}
	check := func(name string, n int, shape []int) error {
		if n == 0 && (name == "images" || name == "labels" || name == "tokens" || name == "image_features" || clientKey.MatchString(name)) {
			return fmt.Errorf("tensor %q in the batch file is empty (shape %v): a step or round needs at least one example", name, shape)
		}
		if m := clientKey.FindStringSubmatch(name); m != nil {
			i, _ := strconv.Atoi(m[1])
			if _, ok := seen[i]; !ok {
				seen[i] = name
			}
		}
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(f.Batch)) {
		if err := check(name, len(f.Batch[name].Data), f.Batch[name].Shape); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(f.Ints)) {
		if err := check(name, len(f.Ints[name]), []int{len(f.Ints[name])}); err != nil {
			return err
		}
	}
	if tok, ok := f.Ints["tokens"]; ok && f.Model != nil && f.Model.W != nil {
		if ctx := f.Model.W.Config.Text.ContextLength; ctx > 0 && len(tok)%ctx != 0 {
			return fmt.Errorf("tensor \"tokens\" holds %d ids, not whole rows of the model's context length %d", len(tok), ctx)
		}
	}
	for i := range len(seen) {
		if _, ok := seen[i]; !ok {
			last := slices.Max(slices.Collect(maps.Keys(seen)))
			return fmt.Errorf("the batch files hold %q but no tensor of client%d: client indices must run 0, 1, 2, … without a gap", seen[last], i)
		}
	}
	return nil
}
