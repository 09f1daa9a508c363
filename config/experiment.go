// Package config is the experiment configuration of `pfedmma run`: the
// [Experiment] struct (one YAML file), its validation, the named presets, and
// the merge of preset, file and command-line overrides.
//
// A run's settings come from three layers, each overriding only what it sets:
//
//  1. a preset ([Preset]; [Default] when none is named),
//  2. the YAML file (--config exp.yaml), decoded onto the preset,
//  3. --set path=value overrides ([Experiment.Set]), e.g. federation.rounds=3.
//
// [Compose] applies the three layers and validates the result; every error
// names the file, the line and the field path, e.g.
//
//	exp.yaml: line 7: federation.fraction: 1.5 not in (0, 1]
//
// The YAML keys are the snake_case names in the struct tags below; unknown
// keys are errors. config/example.yaml is a commented example that sets every
// field ([Example] returns it). Relative paths (model, vocab, dataset.root,
// cache.spill_dir) are relative to the working directory of the run, not to
// the config file.
package config

// Experiment is one `pfedmma run` configuration. The zero value is not
// valid; start from [Default] or [Preset].
type Experiment struct {
	// Name labels the run in reports and the default output folder name.
	// Optional; it does not enter the [Experiment.Fingerprint].
	Name string `yaml:"name"`

	// Methods are the methods compared in one run, in report order, on the
	// same clients and data: any registered method (`pfedmma methods`
	// lists them: zeroshot, pfedmma, ...). An unknown name is an error
	// before any work starts.
	Methods []string `yaml:"methods"`

	// Model is the CLIP checkpoint (safetensors, OpenAI/open_clip or
	// Hugging Face names). Empty means the tiny CLIP model embedded in the
	// binary (pretrained on the generated world dataset).
	Model string `yaml:"model"`

	// Vocab is the BPE vocabulary of the tokenizer. Empty means the one
	// found next to the model (or embedded with the default model).
	Vocab string `yaml:"vocab"`

	// Prompt is the class-prompt template; "{}" is replaced by the class
	// name (underscores become spaces). Default "a photo of a {}.".
	Prompt string `yaml:"prompt"`

	// Dataset selects the data.
	Dataset Dataset `yaml:"dataset"`

	// Protocol says how the data is cut into clients and scored.
	Protocol Protocol `yaml:"protocol"`

	// Federation sets the number of clients and the round structure.
	Federation Federation `yaml:"federation"`

	// Aggregation hardens the server's aggregation (robust rules,
	// clipping, differential privacy); off by default. See [Aggregation].
	Aggregation Aggregation `yaml:"aggregation"`

	// Optimizer is the local optimizer of every trained method.
	Optimizer Optimizer `yaml:"optimizer"`

	// BatchSize is the training mini-batch size (≥ 1); the paper uses 32.
	BatchSize int `yaml:"batch_size"`

	// Train holds the local training loop's batching options.
	Train Train `yaml:"train"`

	// Augment is the training augmentation, written as a string: "none",
	// "views:K" or "online". See [Augment].
	Augment Augment `yaml:"augment"`

	// Cache bounds the activation cache of frozen-prefix outputs. It does
	// not change results and is left out of the fingerprint.
	Cache Cache `yaml:"cache"`

	// Engine selects the arithmetic of the frozen weights' products.
	Engine Engine `yaml:"engine"`

	// Seed seeds everything random in a run: the few-shot draw, the client
	// partition, client sampling, adapter initialisation, batch order and
	// augmentation.
	Seed uint64 `yaml:"seed"`

	// Seeds, when non-empty, repeats the whole run once per seed (Seed is
	// then ignored) and reports the mean over seeds; the paper averages 3
	// seeds. See [Experiment.RunSeeds].
	Seeds []uint64 `yaml:"seeds"`

	// Threads caps the worker threads (≥ 0); 0 uses every CPU. It does not
	// change results and is left out of the fingerprint.
	Threads int `yaml:"threads"`

	// Eval configures evaluation.
	Eval Eval `yaml:"eval"`

	// Output selects what is written besides the metrics. It does not change
	// results and is left out of the fingerprint.
	Output Output `yaml:"output"`

	// Sections holds each registered method's own settings under its name
	// (e.g. pfedmma: {dim: 32}); see [RegisterSection].
	Sections map[string]Section `yaml:"-"`
}

// Dataset selects a dataset and how much of it is used.
type Dataset struct {
	// Name is a registered dataset: world (generated, needs no files),
	// caltech101, oxford_pets, oxford_flowers, food101, dtd, sun397, ucf101
	// (CoOp layout), cifar10, cifar100, domainnet, office_caltech10,
	// imagefolder, fashion_mnist.
	Name string `yaml:"name"`

	// Root is the DATA folder the dataset lives under (CoOp convention:
	// DATA/caltech-101, DATA/cifar-10-batches-bin, ...). Required except
	// for world (ignored) and fashion_mnist (default
	// /usr/share/datasets/fashion-mnist, Debian's dataset-fashion-mnist).
	Root string `yaml:"root"`

	// Shots is the number of training images drawn per class (≥ 0); 0 uses
	// every training image. The paper's base-to-novel setting uses 16.
	Shots int `yaml:"shots"`

	// ImageSize is the side in pixels images are resized and cropped to
	// (≥ 0); 0 means the model's input size (the usual choice).
	ImageSize int `yaml:"image_size"`

	// NumClasses is the number of classes of the generated world dataset
	// (0 = the world's default, 20; otherwise ≥ 2). Ignored by other
	// datasets.
	NumClasses int `yaml:"num_classes"`

	// Domains restricts a multi-domain dataset to these domains, in this
	// order (domainnet: clipart infograph painting quickdraw real sketch;
	// office_caltech10: amazon caltech dslr webcam; world: photo clipart
	// sketch painting). Empty means all domains in the standard order.
	Domains []string `yaml:"domains"`

	// ValFraction, in [0, 1), moves that fraction of each class's training
	// images into a validation split for datasets that ship none (needed
	// for eval.split: val). 0 keeps the dataset's own splits.
	ValFraction float64 `yaml:"val_fraction"`
}

// Protocol names.
const (
	// ProtocolBaseToNovel: classes split in half; base classes dealt to
	// clients without overlap; scored Local / Base / Novel / HM.
	ProtocolBaseToNovel = "base2novel"
	// ProtocolDirichlet: label shift by Dir(β) over all classes; scored by
	// each client's accuracy on its local test split.
	ProtocolDirichlet = "dirichlet"
	// ProtocolDomains: feature + label shift; every domain is split into
	// clients_per_domain clients by Dir(β); scored per domain and overall.
	ProtocolDomains = "domains"
	// ProtocolPathological: classes dealt to clients without overlap, each
	// scored on its own classes (pFedMoAP).
	ProtocolPathological = "pathological"
	// ProtocolNatural: each writer (FEMNIST) or domain is a client.
	ProtocolNatural = "natural"
	// ProtocolLODO: one client per source domain, the held-out domain
	// scores the global model (FedOT's G/P/C).
	ProtocolLODO = "leave_one_domain_out"
	// ProtocolDG: federated domain generalisation: train on the source
	// domains, score the global model on the unseen one (ADAPT).
	ProtocolDG = "domain_generalization"
)

// Protocol says how the dataset is cut into clients and how they are scored
// (baselines.md §7).
type Protocol struct {
	// Name is base2novel, dirichlet, domains, pathological, natural,
	// leave_one_domain_out or domain_generalization.
	Name string `yaml:"name"`

	// Beta is the Dirichlet concentration β > 0 of the dirichlet and domains
	// protocols (small β, strong label skew); the paper sweeps 0.1 … 10 and
	// uses 0.5 by default. Ignored by base2novel.
	Beta float64 `yaml:"beta"`

	// ClientsPerDomain (≥ 1) is how many clients each domain is split into
	// under the domains protocol (the paper: 1 or 2). Ignored otherwise.
	ClientsPerDomain int `yaml:"clients_per_domain"`

	// MinSamples (≥ 0) is the fewest training and the fewest test images
	// every client must get from a Dirichlet draw; the draw is repeated
	// until it holds. 0 means no minimum; the reference code uses 10.
	// Ignored by base2novel.
	MinSamples int `yaml:"min_samples"`

	// BaseSet chooses what base2novel's Base accuracy measures: "all"
	// (default; every base-class test image, as the reference code and
	// baselines.md) or "others" (only the base classes held by other
	// clients, the pFedMMA paper's wording).
	BaseSet string `yaml:"base_set"`

	// HeldOut is the domain leave_one_domain_out and domain_generalization
	// keep out of training (its test images score the global model); empty
	// runs every domain in turn, one fold each.
	HeldOut string `yaml:"held_out"`

	// Validation, in [0, 1), holds out that fraction of each client's
	// training images (seeded, per class; at least one image) as its
	// validation set, never a test image. Its accuracy is the "val" metric,
	// reported each round beside the others; model selection and `pfedmma
	// tune` read it. 0 (the default) holds nothing out.
	Validation float64 `yaml:"validation"`
}

// Federation sets the clients and the round structure (Algorithm 1).
type Federation struct {
	// Clients is the number of clients N (≥ 1). Under the domains protocol
	// it may be 0, meaning (number of domains) × clients_per_domain; when
	// set it must equal that product.
	Clients int `yaml:"clients"`

	// Fraction in (0, 1] is the share of clients sampled each round after
	// round 0 (which always takes every client, as the reference code
	// does): max(1, ⌊fraction·N⌋) clients.
	Fraction float64 `yaml:"fraction"`

	// Rounds is the number of communication rounds T (≥ 1).
	Rounds int `yaml:"rounds"`

	// LocalEpochs is the number of passes E (≥ 1) each selected client makes
	// over its training data per round.
	LocalEpochs int `yaml:"local_epochs"`

	// EvalEvery evaluates every client after rounds k, 2k, … (1-based) and
	// always after the last round; 0 evaluates only after the last round.
	EvalEvery int `yaml:"eval_every"`

	// Compress is how the tensors of every message between the coordinator
	// and a site are encoded, both directions (package compress): none
	// (float32, exact; also the empty value), fp16 (half precision, round
	// to nearest even) or int8 (blockwise, one float32 scale per 64
	// values). `pfedmma run` applies the same encoding to its simulated
	// messages, so serve + sites still equal run.
	Compress string `yaml:"compress,omitempty"`
	// SecureAggregation aggregates the shared tensors with secure
	// aggregation (package secagg, SecAgg+): the coordinator only holds
	// masked updates and their sum; updates are quantised (error ≤ 2^-25
	// per value of the weighted mean), in `run` as in `serve`. Methods whose
	// server needs each site's update, and aggregation rules other than the
	// mean, clip_norm and dp at the server, are refused with it.
	SecureAggregation bool `yaml:"secure_aggregation"`
	// ClientDropRate in [0, 1) is FLiP's client drop rate (its
	// --client_drop_rate; flcore/servers/server_base.py, receive_results):
	// every sampled client trains, then the updates of all but
	// ⌊(1−rate)·m⌋ of the round's m sampled clients are discarded, drawn
	// from the run's seed and the round, and the rest are aggregated,
	// weighted among themselves. 0 (the default) drops nothing. Refused
	// with secure_aggregation, and when it would keep no client.
	ClientDropRate float64 `yaml:"client_drop_rate,omitempty"`
}

// Optimizer names.
const (
	OptimizerSGD   = "sgd"
	OptimizerAdamW = "adamw"
)

// Learning-rate schedule names.
const (
	ScheduleConstant = "constant"
	ScheduleCosine   = "cosine"
)

// Train is the local training loop's batching.
type Train struct {
	// DropLast says whether an epoch drops its partial last batch when the
	// client holds at least one full batch: auto (the default) does what
	// each method's authors' training loader does (methods.Info.Loader:
	// Dassl's loaders, drop_last = is_train and len(data) >= batch_size,
	// drop it; CLIP-LoRA's, FedTPG's, FedMVP's, PMFLT's keep it); true or
	// false force it for every method of the run. A client whose examples
	// fill whole batches trains the same either way.
	DropLast string `yaml:"drop_last"`
}

// train.drop_last values.
const (
	DropLastAuto  = "auto"
	DropLastTrue  = "true"
	DropLastFalse = "false"
)

// Optimizer is the local optimizer.
type Optimizer struct {
	// Name is sgd (PyTorch SGD with momentum, the paper's choice) or adamw
	// (β1 0.9, β2 0.999).
	Name string `yaml:"name"`

	// LR is the (peak) learning rate, > 0; the paper uses 0.001.
	LR float64 `yaml:"lr"`

	// Momentum in [0, 1) is SGD's momentum (paper: 0.9); ignored by adamw.
	Momentum float64 `yaml:"momentum"`

	// WeightDecay (≥ 0) is L2 weight decay for sgd, decoupled decay for
	// adamw; the paper uses 5e-4.
	WeightDecay float64 `yaml:"weight_decay"`

	// Schedule is constant (the paper) or cosine (annealed to 0 over
	// rounds × local_epochs epochs, stepped once per local epoch).
	Schedule string `yaml:"schedule"`

	// WarmupEpochs (≥ 0, below rounds × local_epochs) ramps the learning
	// rate linearly from 0 over that many epochs; 0 = no warmup. Cosine
	// schedule only.
	WarmupEpochs int `yaml:"warmup_epochs"`

	// ResetEachRound recreates every client's optimizer state (momentum
	// buffers) at the start of each round it takes part in. With false each
	// client keeps its own state across rounds. The reference code shares
	// one optimizer among all clients (a bug, not reproduced); resetting is
	// the default because the shared weights a client resumes from are
	// replaced by the server's aggregate each round.
	ResetEachRound bool `yaml:"reset_each_round"`
}

// Cache bounds the activation cache (frozen-prefix outputs per image view).
type Cache struct {
	// MemoryMiB (≥ 0) is the RAM budget in MiB; records beyond it spill to
	// a memory-mapped file. 0 lets the runner choose from the machine's
	// memory.
	MemoryMiB int `yaml:"memory_mib"`

	// SpillDir is where spill files go; empty means the system temporary
	// folder.
	SpillDir string `yaml:"spill_dir"`

	// DType is float32 (exact, the default) or bfloat16 (half the memory,
	// about 3 significant digits).
	DType string `yaml:"dtype"`
}

// Engine selects the compute engine's arithmetic.
type Engine struct {
	// Precision of the frozen weights' products: fp32 (exact, the default)
	// or bf16 (bfloat16 inputs with float32 accumulation through oneDNN,
	// about twice as fast; trainable parameters, adapters, LayerNorm,
	// softmax and the loss stay float32), or auto (bf16 where a start-up
	// probe at the model's shapes measures it faster on this machine, else
	// fp32; it logs both rates and the choice). The README gives bf16's
	// measured accuracy effect.
	Precision string `yaml:"precision"`
}

// Cache storage types.
const (
	DTypeFloat32  = "float32"
	DTypeBFloat16 = "bfloat16"
)

// Evaluation splits.
const (
	SplitTest = "test"
	SplitVal  = "val"
)

// Eval configures evaluation.
type Eval struct {
	// Split is the split every reported accuracy is measured on: test, or
	// val (the dataset's validation split, or one carved out with
	// dataset.val_fraction) for tuning without touching the test set.
	// Reports always give the final round, never a best round picked on
	// the evaluated split.
	Split string `yaml:"split"`

	// BatchSize (≥ 1) is the evaluation batch size; the paper uses 100.
	BatchSize int `yaml:"batch_size"`

	// Personal adds FLiP's "personal" accuracy (its personal benchmark;
	// flcore/utils.py eval_personal): right after its local training each
	// client whose update the round aggregates scores the model it just
	// trained — before the server aggregates it — on its own test split
	// (Local under base2novel, acc otherwise), and the round's "personal"
	// is their mean weighted by training-set sizes. It costs one more
	// evaluation per client and round.
	Personal bool `yaml:"personal,omitempty"`
}

// Output selects what a run writes besides metrics, the resolved config and
// the report.
type Output struct {
	// Plots writes accuracy-per-round and summary plots (PNG and SVG).
	Plots bool `yaml:"plots"`

	// SaveAdapters writes every client's final trained parameters
	// (safetensors) so they can be evaluated or inspected later.
	SaveAdapters bool `yaml:"save_adapters"`
}

// RunSeeds returns the seeds the run repeats over: Seeds when set, else
// [Seed].
func (e *Experiment) RunSeeds() []uint64 {
	if len(e.Seeds) > 0 {
		return append([]uint64(nil), e.Seeds...)
	}
	return []uint64{e.Seed}
}

// Clone returns a deep copy of e.
func (e *Experiment) Clone() *Experiment {
	c := *e
	c.Methods = cloneSlice(e.Methods)
	c.Dataset.Domains = cloneSlice(e.Dataset.Domains)
	c.Seeds = cloneSlice(e.Seeds)
	c.Sections = cloneSections(e.Sections)
	return &c
}

func cloneSlice[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append([]T(nil), s...)
}
