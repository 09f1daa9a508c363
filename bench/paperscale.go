package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/prefixcache"
	"github.com/pfedmma/pfedmma/protocol"
)

// DatasetCounts are a dataset's real sizes: classes and the images of the
// training and test splits (CoOp's split files for the CLIP datasets; the
// standard splits for CIFAR). The paper-scale projection builds its task
// from these counts, since the datasets cannot be downloaded here.
type DatasetCounts struct {
	Classes, Train, Test int
}

// PaperDatasets are the real counts of the datasets the paper presets name.
var PaperDatasets = map[string]DatasetCounts{
	"caltech101":     {100, 4128, 2465},
	"oxford_pets":    {37, 2944, 3669},
	"oxford_flowers": {102, 4093, 2463},
	"dtd":            {47, 2820, 1692},
	"eurosat":        {10, 13500, 8100},
	"fgvc_aircraft":  {100, 3334, 3333},
	"food101":        {101, 50500, 30300},
	"stanford_cars":  {196, 6509, 8041},
	"sun397":         {397, 15880, 19850},
	"ucf101":         {101, 7639, 3783},
	"cifar10":        {10, 50000, 10000},
	"cifar100":       {100, 50000, 10000},
}

// PaperScaleOptions configure `pfedmma bench experiment --preset`.
type PaperScaleOptions struct {
	// Presets are "NAME" or "NAME:DATASET" (e.g. paper-cifar:cifar100).
	Presets []string
	// RoundsMeasured is the number of measured rounds (≥ 2: the first
	// fills the cache and trains every client).
	RoundsMeasured int
	// Scale multiplies the shots (or, with the full training set, the
	// training images per class) and the test images per class of the
	// measured run; classes, model, method and batch stay the preset's.
	Scale float64
	// ClientsMeasured is the number of clients of the measured run
	// (0: the preset's, at most 10).
	ClientsMeasured int
	// MemoryBudgetMiB is the prefix caches' RAM budget of the projected run
	// (cache.memory_mib); beyond it records spill to a memory-mapped file.
	MemoryBudgetMiB int
	// CacheBF16 stores the cached prefixes as bfloat16 (cache.dtype).
	CacheBF16 bool
	// SpillCompare measures the rounds a second time with every cached
	// record spilled (cache.memory_mib 1).
	SpillCompare bool
	// Dir holds the generated data and model (default: a temporary folder).
	Dir string
	Log func(string)
}

// MeasuredRun is one preset's measured rounds at ViT-B/16 shapes.
type MeasuredRun struct {
	Dataset            string        `json:"generated_dataset"`
	Scale              float64       `json:"scale"` // of the shots and test images per class
	Classes            int           `json:"classes"`
	Clients            int           `json:"clients"`
	TrainImages        int           `json:"train_images_per_round"` // local epochs × every client's images
	EvalImages         int           `json:"eval_images_per_round"`  // every client's evaluation sets
	CachedRecords      int           `json:"cached_records"`
	CacheFillSeconds   float64       `json:"cache_fill_seconds"`
	Rounds             []RoundTiming `json:"rounds"`
	SecondsPerRound    float64       `json:"seconds_per_round"` // median after the first
	TrainSecondsPerImg float64       `json:"train_seconds_per_image"`
	EvalSecondsPerImg  float64       `json:"eval_seconds_per_image"`
	FillSecondsPerRec  float64       `json:"fill_seconds_per_record"`
	PeakRSSMiB         float64       `json:"peak_rss_mib"`
	// The same rounds with every cached record spilled (SpillCompare).
	SpilledSecondsPerRound float64       `json:"spilled_seconds_per_round,omitempty"`
	SpilledRounds          []RoundTiming `json:"spilled_rounds,omitempty"`
	SpillFactor            float64       `json:"spill_factor,omitempty"`
	LoadBefore             string        `json:"load_before"`
	LoadAfter              string        `json:"load_after"`
}

// Projection is the whole preset (every seed, every round, evaluation as
// the recipe says) projected from the measured per-image rates.
type Projection struct {
	Clients, PerRound, Shots, Rounds, Seeds, LocalEpochs, EvalEvery int
	TrainImagesRound0                                               int     `json:"train_images_round0"`
	TrainImagesPerRound                                             int     `json:"train_images_per_round"`
	EvalImagesPerEval                                               int     `json:"eval_images_per_evaluation"`
	Evaluations                                                     int     `json:"evaluations"`
	CachedRecords                                                   int64   `json:"cached_records"`
	CacheGiB                                                        float64 `json:"cache_gib"`
	CacheRAMGiB                                                     float64 `json:"cache_ram_gib"`
	SpillGiB                                                        float64 `json:"spill_disk_gib"`
	PeakGiB                                                         float64 `json:"peak_ram_gib"`
	FillSeconds                                                     float64 `json:"cache_fill_seconds"`
	RoundSeconds                                                    float64 `json:"steady_round_seconds"` // training only
	EvalSeconds                                                     float64 `json:"evaluation_seconds"`   // one evaluation of every client
	SeedSeconds                                                     float64 `json:"seconds_per_seed"`
	Hours                                                           float64 `json:"hours"`
	Spilled                                                         bool    `json:"spilled"`
}

// ScalePoint is the projection with one setting changed.
type ScalePoint struct {
	Axis    string  `json:"axis"` // clients, shots, rounds
	X       int     `json:"x"`
	Hours   float64 `json:"hours"`
	PeakGiB float64 `json:"peak_ram_gib"`
}

// PresetScale is one preset's measurement, projection and scaling.
type PresetScale struct {
	Preset     string        `json:"preset"`
	Dataset    string        `json:"dataset"`
	Method     string        `json:"method"`
	Real       DatasetCounts `json:"real_counts"`
	Measured   MeasuredRun   `json:"measured"`
	Projection Projection    `json:"projection"`
	Scaling    []ScalePoint  `json:"scaling"`
}

// PaperScaleResult is what `pfedmma bench experiment --preset` writes.
type PaperScaleResult struct {
	CPU             gemm.CPUInfo  `json:"cpu"`
	Backend         string        `json:"backend"`
	Kernel          string        `json:"kernel"`
	Threads         int           `json:"threads"`
	CPUs            int           `json:"cpus"`
	MemoryBudgetMiB int           `json:"memory_budget_mib"`
	CacheDType      string        `json:"cache_dtype"`
	Presets         []PresetScale `json:"presets"`
}

// MergePaperScale reads the JSON of earlier `bench experiment --preset`
// runs (paperscale.json) and joins their presets, so that one table and
// one plot show presets measured in separate runs (same machine, budget
// and cache storage: the first file's are kept, a difference is an error).
func MergePaperScale(paths []string, sameSettings bool) (*PaperScaleResult, error) {
	var out *PaperScaleResult
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("--merge: %w", err)
		}
		var r PaperScaleResult
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("--merge %s: %w", p, err)
		}
		if len(r.Presets) == 0 {
			return nil, fmt.Errorf("--merge %s: no presets", p)
		}
		if out == nil {
			out = &r
			continue
		}
		if sameSettings && (r.MemoryBudgetMiB != out.MemoryBudgetMiB || r.CacheDType != out.CacheDType) {
			return nil, fmt.Errorf("--merge %s: memory_budget_mib %d, cache_dtype %s; %s has %d, %s: project with the same settings",
				p, r.MemoryBudgetMiB, r.CacheDType, paths[0], out.MemoryBudgetMiB, out.CacheDType)
		}
		out.Presets = append(out.Presets, r.Presets...)
	}
	if out == nil {
		return nil, fmt.Errorf("--merge: no files")
	}
	return out, nil
}

// PaperScale measures each preset's rounds at ViT-B/16 shapes on generated
// images of the dataset's class count and projects the whole preset.
func PaperScale(ctx context.Context, o PaperScaleOptions) (*PaperScaleResult, error) {
	if o.RoundsMeasured < 2 {
		return nil, fmt.Errorf("--rounds-measured %d: need at least 2 (the first fills the cache)", o.RoundsMeasured)
	}
	if !(o.Scale > 0 && o.Scale <= 1) {
		return nil, fmt.Errorf("--scale %v: want a fraction in (0, 1]", o.Scale)
	}
	if o.MemoryBudgetMiB < 1 {
		return nil, fmt.Errorf("--memory-budget %d: want a positive number of MiB", o.MemoryBudgetMiB)
	}
	if len(o.Presets) == 0 {
		return nil, fmt.Errorf("--preset: name at least one paper preset")
	}
	logf := o.Log
	if logf == nil {
		logf = func(string) {}
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "pfedmma-paperscale-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	res := &PaperScaleResult{CPU: gemm.CPU(), Backend: gemm.Backend(), Kernel: gemm.CoreName(), Threads: gemm.Threads(),
		CPUs: numCPU(), MemoryBudgetMiB: o.MemoryBudgetMiB, CacheDType: "float32"}
	if o.CacheBF16 {
		res.CacheDType = "bfloat16"
	}
	// every preset checked before the model is written
	type job struct {
		spec, name, method string
		e                  *config.Experiment
		real               DatasetCounts
	}
	var jobs []job
	for _, spec := range o.Presets {
		name, ds, _ := strings.Cut(spec, ":")
		e, err := config.Preset(name)
		if err != nil {
			return nil, fmt.Errorf("--preset %s: %w", spec, err)
		}
		if ds != "" {
			e.Dataset.Name = ds
		}
		real, ok := PaperDatasets[e.Dataset.Name]
		if !ok {
			return nil, fmt.Errorf("--preset %s: dataset %q has no known counts (known: %s)", spec, e.Dataset.Name, knownDatasets())
		}
		method, err := experiment.TrainedMethod(e.Methods)
		if err != nil {
			return nil, fmt.Errorf("--preset %s: %w", spec, err)
		}
		jobs = append(jobs, job{spec, name, method, e, real})
	}
	logf("writing a random ViT-B/16")
	model, err := writeViTB16(filepath.Join(dir, "model"))
	if err != nil {
		return nil, err
	}
	for i, j := range jobs {
		spec, name, method, e, real := j.spec, j.name, j.method, j.e, j.real
		ps := PresetScale{Preset: name, Dataset: e.Dataset.Name, Method: method, Real: real}
		m, err := measurePreset(ctx, o, e, method, real, model, filepath.Join(dir, fmt.Sprintf("p%d", i)), logf)
		if err != nil {
			return nil, fmt.Errorf("--preset %s: %w", spec, err)
		}
		ps.Measured = *m
		if err := ps.project(e, model, o, logf); err != nil {
			return nil, fmt.Errorf("--preset %s: projection: %w", spec, err)
		}
		res.Presets = append(res.Presets, ps)
	}
	return res, nil
}

// project fills ps's projection and scaling from its measured rates.
func (ps *PresetScale) project(e *config.Experiment, model string, o PaperScaleOptions, logf func(string)) error {
	m := &ps.Measured
	pr, err := projectPreset(e, ps.Real, model, m, o, 0, 0, 0)
	if err != nil {
		return err
	}
	ps.Projection, ps.Scaling = *pr, nil
	for _, axis := range []string{"clients", "shots", "rounds"} {
		for _, x := range scaleValues(axis, e) {
			var c, s, r int
			switch axis {
			case "clients":
				c = x
			case "shots":
				s = x
			default:
				r = x
			}
			p, err := projectPreset(e, ps.Real, model, m, o, c, s, r)
			if err != nil {
				logf(fmt.Sprintf("%s: %s %d: %v (left out)", ps.Preset, axis, x, err))
				continue
			}
			ps.Scaling = append(ps.Scaling, ScalePoint{Axis: axis, X: x, Hours: p.Hours, PeakGiB: p.PeakGiB})
		}
	}
	return nil
}

// Reproject recomputes the projections of r's presets from their measured
// rates under o's memory budget and cache storage (no new measurement).
func Reproject(r *PaperScaleResult, o PaperScaleOptions) error {
	if o.MemoryBudgetMiB < 1 {
		return fmt.Errorf("--memory-budget %d: want a positive number of MiB", o.MemoryBudgetMiB)
	}
	logf := o.Log
	if logf == nil {
		logf = func(string) {}
	}
	dir, err := os.MkdirTemp("", "pfedmma-reproject-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// the projection reads the model only for the configuration's checks;
	// its record size is ViT-B/16's
	model := filepath.Join(dir, "model.safetensors")
	cfg := clip.Config{EmbedDim: 16,
		Vision: clip.VisionConfig{ImageSize: 224, PatchSize: 16, Width: 32, Layers: 12, Heads: 1, MLPWidth: 64},
		Text:   clip.TextConfig{ContextLength: 77, VocabSize: 600, Width: 32, Layers: 12, Heads: 1, MLPWidth: 64}}
	if err := checkpoint.Save(model, clip.Random(cfg, 1), checkpoint.OpenAI); err != nil {
		return err
	}
	r.MemoryBudgetMiB, r.CacheDType = o.MemoryBudgetMiB, "float32"
	if o.CacheBF16 {
		r.CacheDType = "bfloat16"
	}
	for i := range r.Presets {
		ps := &r.Presets[i]
		e, err := config.Preset(ps.Preset)
		if err != nil {
			return fmt.Errorf("preset %s: %w", ps.Preset, err)
		}
		e.Dataset.Name = ps.Dataset
		if ps.Real.Classes == 0 {
			ps.Real = PaperDatasets[ps.Dataset]
		}
		if ps.Real.Classes == 0 {
			return fmt.Errorf("preset %s: dataset %q has no known counts (known: %s)", ps.Preset, ps.Dataset, knownDatasets())
		}
		if err := ps.project(e, model, o, logf); err != nil {
			return fmt.Errorf("preset %s: projection: %w", ps.Preset, err)
		}
	}
	return nil
}

func knownDatasets() string {
	var k []string
	for n := range PaperDatasets {
		k = append(k, n)
	}
	return strings.Join(sortedStrings(k), ", ")
}

// scaleValues are the settings the scaling plot varies.
func scaleValues(axis string, e *config.Experiment) []int {
	switch axis {
	case "clients":
		return []int{5, 10, 20, 50, 100}
	case "shots":
		return []int{1, 2, 4, 8, 16, 32}
	}
	return []int{10, 25, 50, 100, 200}
}

// measurePreset runs o.RoundsMeasured rounds of e's trained method at
// ViT-B/16 shapes on a generated CoOp DTD-layout folder with the real
// number of classes, every client trained and evaluated every round.
func measurePreset(ctx context.Context, o PaperScaleOptions, e *config.Experiment, method string, real DatasetCounts,
	model, dir string, logf func(string)) (*MeasuredRun, error) {
	p := &presetRun{ctx: ctx, o: o, e: e, method: method, model: model, dir: dir, root: filepath.Join(dir, "DATA"), logf: logf}
	testM := p.sizes(real)
	logf(fmt.Sprintf("%s: generating %d classes × (%d train + %d test) images at 224 px", method, real.Classes, p.shotsM, testM))
	if err := writeDTD(p.root, real.Classes, p.shotsM, testM); err != nil {
		return nil, err
	}
	m := &MeasuredRun{Dataset: "dtd layout (generated)", Scale: o.Scale, Classes: real.Classes, Clients: p.clients, LoadBefore: loadAvg()}
	rounds, fill, opts, err := p.run(1<<20, "ram") // 1 TiB: every record in RAM
	if err != nil {
		return nil, err
	}
	m.PeakRSSMiB = peakRSSMiB()
	m.Rounds, m.CacheFillSeconds = rounds, fill
	task, err := taskOf(*opts)
	if err != nil {
		return nil, err
	}
	m.count(task, e)
	var tot, fit, ev []float64
	for _, r := range rounds[1:] {
		tot, fit, ev = append(tot, r.Seconds), append(fit, r.Fit+r.Aggregate), append(ev, r.Eval)
	}
	m.SecondsPerRound = median(tot)
	m.TrainSecondsPerImg = median(fit) / float64(max(m.TrainImages, 1))
	m.EvalSecondsPerImg = median(ev) / float64(max(m.EvalImages, 1))
	m.FillSecondsPerRec = fill / float64(max(m.CachedRecords, 1))
	logf(fmt.Sprintf("%s: cache fill %.1f s (%d records), %d training and %d evaluation images per round: %.3f s per training image, %.3f s per evaluation image, peak RSS %.0f MiB",
		method, fill, m.CachedRecords, m.TrainImages, m.EvalImages, m.TrainSecondsPerImg, m.EvalSecondsPerImg, m.PeakRSSMiB))
	if o.SpillCompare {
		sr, _, _, err := p.run(1, "spilled") // 1 MiB: every record but a few spilled
		if err != nil {
			return nil, fmt.Errorf("spilled run: %w", err)
		}
		m.SpilledRounds = sr
		var st []float64
		for _, r := range sr[1:] {
			st = append(st, r.Seconds)
		}
		m.SpilledSecondsPerRound = median(st)
		m.SpillFactor = m.SpilledSecondsPerRound / m.SecondsPerRound
	}
	m.LoadAfter = loadAvg()
	return m, nil
}

// presetRun is the measured run of one preset's method: its generated data
// in root, its shots per class and clients (sizes).
type presetRun struct {
	ctx                      context.Context
	o                        PaperScaleOptions
	e                        *config.Experiment
	method, model, dir, root string
	shotsM, clients          int
	logf                     func(string)
}

// sizes sets the measured run's shots per class and clients from the
// preset's and the real dataset's, and returns its test images per class.
func (p *presetRun) sizes(real DatasetCounts) (testM int) {
	e, o := p.e, p.o
	shots := e.Dataset.Shots
	if shots == 0 { // the full training set: its images per class
		shots = max(1, real.Train/real.Classes)
	}
	p.shotsM = max(1, int(math.Round(float64(shots)*o.Scale)))
	testM = max(1, int(math.Round(float64(real.Test)/float64(real.Classes)*o.Scale)))
	clients := o.ClientsMeasured
	if clients <= 0 {
		clients = min(e.Federation.Clients, 10)
	}
	if e.Protocol.Name == config.ProtocolBaseToNovel {
		clients = min(clients, real.Classes/4) // two base classes per client
	}
	// a method whose settings need a pool of clients (pFedMoAP's
	// num_experts) is measured with at least that many
	if mc, ok := e.Section(p.method).(interface{ MinClients() int }); ok && mc.MinClients() > clients {
		p.logf(fmt.Sprintf("%s: measuring %d clients, not %d: its settings need at least %d", p.method, min(mc.MinClients(), e.Federation.Clients), clients, mc.MinClients()))
		clients = min(mc.MinClients(), e.Federation.Clients)
	}
	p.clients = clients
	return testM
}

// run runs the measured experiment with a prefix cache of budgetMiB (tag
// names its folder) and returns its round timings, its cache fill seconds
// and its options.
func (p *presetRun) run(budgetMiB int, tag string) ([]RoundTiming, float64, *experiment.Options, error) {
	e, o := p.e, p.o
	me := *e
	me.Methods = []string{p.method}
	me.Model, me.Dataset.Name, me.Dataset.Root, me.Dataset.Domains = p.model, "dtd", p.root, nil
	if e.Dataset.Shots > 0 {
		me.Dataset.Shots = p.shotsM
	}
	me.Federation.Clients, me.Federation.Rounds, me.Federation.EvalEvery, me.Federation.Fraction = p.clients, o.RoundsMeasured, 1, 1
	me.Protocol.MinSamples = 0 // a small generated set: no minimum per client
	me.Cache.MemoryMiB = budgetMiB
	me.Cache.DType = config.DTypeFloat32
	if o.CacheBF16 {
		me.Cache.DType = config.DTypeBFloat16
	}
	me.Seeds = nil
	me.Output = config.Output{}
	if err := me.Validate(); err != nil {
		return nil, 0, nil, err
	}
	opts, err := experiment.FromConfig(&me, p.model, me.Seed, filepath.Join(p.dir, "run-"+tag))
	if err != nil {
		return nil, 0, nil, err
	}
	var rounds []RoundTiming
	opts.OnRound = func(_ string, r federation.RoundReport) {
		rounds = append(rounds, RoundTiming{Round: r.Round, Seconds: r.Seconds, Fit: r.FitSeconds, Aggregate: r.AggregateSeconds, Eval: r.EvalSeconds})
		p.logf(fmt.Sprintf("%s (%s): round %d: %.1f s (train %.1f, evaluation %.1f)", p.method, tag, r.Round, r.Seconds, r.FitSeconds, r.EvalSeconds))
	}
	out, err := experiment.Run(p.ctx, opts)
	if err != nil {
		return nil, 0, nil, err
	}
	if len(rounds) < 2 {
		return nil, 0, nil, fmt.Errorf("%d rounds timed", len(rounds))
	}
	return rounds, out.Summary.Timings["prefix_s"], &opts, nil
}

// count sets m's images per round (local epochs over each client's
// training images; its test sets) and its cached records.
func (m *MeasuredRun) count(task *protocol.Task, e *config.Experiment) {
	epochs := max(e.Federation.LocalEpochs, 1)
	for _, c := range task.Clients {
		m.TrainImages += epochs * len(c.Train)
		for _, s := range c.Evals {
			m.EvalImages += len(s.Images)
		}
	}
	m.CachedRecords = len(task.UsedTest())
	if e.Augment.Mode != config.AugmentOnline {
		m.CachedRecords += len(task.UsedTrain()) * max(e.Augment.Views, 1)
	}
}

// methodRecord is the cache record of the trained method of opts on a
// model of layers blocks: its depth (methods.Method.Depth; 0, the largest
// record, when it cannot be told) and whether it caches split records
// (methods.Splitter).
func methodRecord(opts experiment.Options, layers int) (depth int, split bool) {
	name, err := experiment.TrainedMethod(opts.Methods)
	if err != nil {
		return 0, false
	}
	meth, err := methods.Get(name)
	if err != nil {
		return 0, false
	}
	split, err = methods.SplitRecords(meth, opts.Sections[name], layers)
	split = err == nil && split
	depth, err = meth.Depth(opts.Sections[name], layers)
	if err != nil || depth == methods.AnyDepth {
		depth = 0
	}
	return depth, split
}

// projectPreset projects the whole preset e (clients, shots, rounds
// overridden when positive) from the measured rates, on a task built from
// the real counts.
func projectPreset(e *config.Experiment, real DatasetCounts, model string, m *MeasuredRun, o PaperScaleOptions,
	clients, shots, rounds int) (*Projection, error) {
	pe := *e
	if clients > 0 {
		pe.Federation.Clients = clients
	}
	if shots > 0 {
		pe.Dataset.Shots = shots
	}
	if rounds > 0 {
		pe.Federation.Rounds = rounds
	}
	opts, err := experiment.FromConfig(&pe, model, pe.Seed, "")
	if err != nil {
		return nil, err
	}
	p := opts.Protocol
	p.Seed = pe.Seed
	task, err := protocol.Build(syntheticDataset(pe.Dataset.Name, real), p)
	if err != nil {
		return nil, err
	}
	f := pe.Federation
	pr := &Projection{Clients: f.Clients, Shots: pe.Dataset.Shots, Rounds: f.Rounds, Seeds: max(len(pe.Seeds), 1),
		LocalEpochs: max(f.LocalEpochs, 1), EvalEvery: f.EvalEvery}
	pr.PerRound = min(f.Clients, max(1, int(f.Fraction*float64(f.Clients)))) // federation.Sampler
	all := 0
	for _, c := range task.Clients {
		all += len(c.Train)
		for _, s := range c.Evals {
			pr.EvalImagesPerEval += len(s.Images)
		}
	}
	pr.TrainImagesRound0 = pr.LocalEpochs * all // round 0 trains every client
	pr.TrainImagesPerRound = int(math.Round(float64(pr.LocalEpochs*all) * float64(pr.PerRound) / float64(f.Clients)))
	for r := 0; r < f.Rounds; r++ { // federation.Coordinator's rule
		if f.EvalEvery <= 1 || (r+1)%f.EvalEvery == 0 || r == f.Rounds-1 {
			pr.Evaluations++
		}
	}
	trainRecs := int64(0)
	if pe.Augment.Mode != config.AugmentOnline {
		trainRecs = int64(len(task.UsedTrain())) * int64(max(pe.Augment.Views, 1))
	}
	testRecs := int64(len(task.UsedTest()))
	pr.CachedRecords = trainRecs + testRecs
	// the trained method's record: image features, token features,
	// embeddings or a prefix (split: block ℓ's frozen output and adapter
	// input)
	vit := clip.ViTB16()
	depth, split := methodRecord(opts, vit.Vision.Layers)
	recBytes := int64(prefixcache.RecordFloats(vit, depth, split)) * 4
	if o.CacheBF16 {
		recBytes /= 2
	}
	half := int64(o.MemoryBudgetMiB) << 19 // experiment: the budget is split between the train and test stores
	ram := min(trainRecs*recBytes, half) + min(testRecs*recBytes, half)
	total := pr.CachedRecords * recBytes
	const gib = 1 << 30
	pr.CacheGiB, pr.CacheRAMGiB, pr.SpillGiB = float64(total)/gib, float64(ram)/gib, float64(total-ram)/gib
	pr.Spilled = total > ram
	// Peak RAM: what the measured run held besides its cache, plus the
	// projected cache's RAM part.
	measuredCache := float64(m.CachedRecords) * float64(recBytes)
	other := max(m.PeakRSSMiB*(1<<20)-measuredCache, 0)
	pr.PeakGiB = (other + float64(ram)) / gib
	slow := 1.0
	if pr.Spilled && m.SpillFactor > 1 {
		slow = m.SpillFactor
	}
	pr.FillSeconds = float64(pr.CachedRecords) * m.FillSecondsPerRec
	pr.RoundSeconds = float64(pr.TrainImagesPerRound) * m.TrainSecondsPerImg * slow
	pr.EvalSeconds = float64(pr.EvalImagesPerEval) * m.EvalSecondsPerImg * slow
	pr.SeedSeconds = pr.FillSeconds + float64(pr.TrainImagesRound0)*m.TrainSecondsPerImg*slow +
		float64(f.Rounds-1)*pr.RoundSeconds + float64(pr.Evaluations)*pr.EvalSeconds
	pr.Hours = float64(pr.Seeds) * pr.SeedSeconds / 3600
	return pr, nil
}

// syntheticDataset is a dataset of the real counts with no images (a
// protocol builds its task from labels alone): classes balanced, the
// remainder to the first classes.
func syntheticDataset(name string, c DatasetCounts) *dataset.Dataset {
	ds := &dataset.Dataset{Name: name, Domains: []string{name}}
	for k := 0; k < c.Classes; k++ {
		ds.Classes = append(ds.Classes, fmt.Sprintf("class %d", k))
	}
	items := func(split string, n int) []dataset.Item {
		out := make([]dataset.Item, n)
		for i := range out {
			out[i] = dataset.Item{Key: fmt.Sprintf("%s/%d", split, i), Label: i % c.Classes}
		}
		return out
	}
	ds.Train, ds.Test = items("train", c.Train), items("test", c.Test)
	return ds
}
