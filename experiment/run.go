package experiment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/pfedmma/pfedmma/actcache"
	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/mma"
	"github.com/pfedmma/pfedmma/preprocess"
	"github.com/pfedmma/pfedmma/progress"
	"github.com/pfedmma/pfedmma/report"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/tokenizer"
)

// Method names.
const (
	ZeroShot = "zeroshot"
	PFedMMA  = "pfedmma"
)

// Options is a fully resolved experiment.
type Options struct {
	ModelPath, VocabPath string
	Dataset, Root        string
	DatasetOptions       dataset.Options
	Protocol             ProtocolOptions
	Methods              []string
	// MMA is the adapter configuration; End 0 means the last block.
	MMA       mma.Config
	Train     TrainOptions
	Rounds    int
	Fraction  float64
	EvalEvery int
	// Augment is "none", "views:K" or "online".
	Augment string
	// NoCache recomputes every prefix whenever it is needed instead of
	// caching it (for checking the cache; much slower).
	NoCache  bool
	Template string
	Seed     uint64
	// CacheMiB bounds the RAM of the prefix cache (0: 4096); beyond it
	// records spill to a memory-mapped file in SpillDir (default: temp).
	CacheMiB int
	SpillDir string
	// CacheBF16 stores cached prefixes as bfloat16 (half the memory; the
	// computation stays float32, the prefixes lose precision: relative
	// error ≤ 2⁻⁸).
	CacheBF16 bool
	// PrefixBatch is the batch size of the prefix computation (default 32).
	PrefixBatch int
	OutDir      string
	Resume      bool
	// Progress receives progress bars (nil: none).
	Progress     io.Writer
	ProgressMode progress.Mode
	SaveAdapters bool
	Plots        bool
	// ConfigYAML, when set, is written to OutDir/config.yaml.
	ConfigYAML []byte
}

// Result is what Run produced.
type Result struct {
	Summary *report.Summary
	Table   report.Table
	Records []report.RoundRecord
}

// LoadModel loads CLIP weights from a checkpoint file or folder and the
// tokenizer (vocab, or the vocabulary shipped with the model when empty).
func LoadModel(path, vocab string) (*clip.Model, *tokenizer.Tokenizer, error) {
	w, info, err := checkpoint.Load(path)
	if err != nil {
		return nil, nil, err
	}
	if info.Activation != "" && info.Activation != "quick_gelu" {
		return nil, nil, fmt.Errorf("model %s: MLP activation %q is not supported (CLIP uses quick_gelu)", path, info.Activation)
	}
	if vocab == "" {
		if vocab, err = tokenizer.FindVocab(path); err != nil {
			return nil, nil, err
		}
	}
	tok, err := tokenizer.Load(vocab)
	if err != nil {
		return nil, nil, err
	}
	if tok.VocabSize() != w.Config.Text.VocabSize {
		return nil, nil, fmt.Errorf("vocabulary %s has %d tokens but model %s expects %d", vocab, tok.VocabSize(), path, w.Config.Text.VocabSize)
	}
	return clip.New(w), tok, nil
}

// parseAugment returns (views, online) for "none", "views:K" or "online".
func parseAugment(s string) (int, bool, error) {
	switch {
	case s == "" || s == "none":
		return 0, false, nil
	case s == "online":
		return 0, true, nil
	case strings.HasPrefix(s, "views:"):
		var k int
		if _, err := fmt.Sscanf(s, "views:%d", &k); err != nil || k < 1 {
			return 0, false, fmt.Errorf("augment %q: want views:K with K ≥ 1", s)
		}
		return k, false, nil
	}
	return 0, false, fmt.Errorf("augment %q: want none, views:K or online", s)
}

// Run executes the experiment.
func Run(ctx context.Context, o Options) (*Result, error) {
	start := time.Now()
	views, online, err := parseAugment(o.Augment)
	if err != nil {
		return nil, err
	}
	if o.OutDir == "" {
		return nil, errors.New("experiment: no output folder")
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("experiment: %w", err)
	}
	if o.ConfigYAML != nil {
		if err := safetensors.WriteFileAtomic(filepath.Join(o.OutDir, "config.yaml"), func(w io.Writer) error {
			_, err := w.Write(o.ConfigYAML)
			return err
		}); err != nil {
			return nil, err
		}
	}
	m, tok, err := LoadModel(o.ModelPath, o.VocabPath)
	if err != nil {
		return nil, err
	}
	L := min(m.W.Config.Vision.Layers, m.W.Config.Text.Layers)
	cfg := o.MMA
	if cfg.End == 0 {
		cfg.End = L
	}
	if err := cfg.Validate(L); err != nil {
		return nil, err
	}
	dsOpts := o.DatasetOptions
	if dsOpts.Seed == 0 {
		dsOpts.Seed = o.Seed
	}
	ds, err := dataset.Load(o.Dataset, o.Root, dsOpts)
	if err != nil {
		return nil, err
	}
	popts := o.Protocol
	popts.Seed = o.Seed
	task, err := BuildTask(ds, popts)
	if err != nil {
		return nil, err
	}
	tmpl := o.Template
	if tmpl == "" {
		tmpl = "a photo of a {}."
	}
	if err := writeRunInfo(o, task, cfg, tmpl); err != nil {
		return nil, err
	}
	S := m.W.Config.Vision.ImageSize
	px := &Prefixer{Model: m, Start: cfg.Start, Transform: preprocess.CLIPTransform(S), Batch: max(o.PrefixBatch, 1)}
	if o.PrefixBatch == 0 {
		px.Batch = 32
	}
	budget := int64(o.CacheMiB) << 20
	if o.CacheMiB == 0 {
		budget = 4096 << 20
	}
	dtype := actcache.Float32
	if o.CacheBF16 {
		dtype = actcache.BFloat16
	}
	trainStore, err := actcache.New(actcache.Options{RecordLen: px.RecordLen(), MemoryBudget: budget / 2, SpillDir: o.SpillDir, DType: dtype})
	if err != nil {
		return nil, err
	}
	defer trainStore.Close()
	testStore, err := actcache.New(actcache.Options{RecordLen: px.RecordLen(), MemoryBudget: budget / 2, SpillDir: o.SpillDir, DType: dtype})
	if err != nil {
		return nil, err
	}
	defer testStore.Close()
	env := &Env{Model: m, Tok: tok, Task: task, Start: cfg.Start, Template: tmpl, Prefixer: px,
		TrainStore: trainStore, TestStore: testStore,
		TrainRecs: map[int][]int{}, TestRecs: map[int]int{}, Online: online, Seed: o.Seed,
		adapterWS: mma.NewWorkspace()}
	slog.Info("experiment", "dataset", ds.Name, "protocol", task.Protocol, "clients", len(task.Clients),
		"train", len(task.UsedTrain()), "test", len(task.UsedTest()), "blocks", fmt.Sprintf("%d-%d", cfg.Start, cfg.End))

	// Frozen prefixes: every test image once, every training view once.
	nViews := len(task.UsedTest())
	if !online {
		nViews += len(task.UsedTrain()) * max(views, 1)
	}
	root := progress.New(o.Progress, nViews, "frozen prefixes", "img", progress.WithMode(o.ProgressMode))
	if o.NoCache {
		env.registerUncached(views)
	} else {
		if err := env.fillTest(ctx, root); err != nil {
			return nil, err
		}
		if !online {
			if err := env.fillTrain(ctx, views, root); err != nil {
				return nil, err
			}
		}
	}
	root.Finish()
	prefixSeconds := time.Since(start).Seconds()

	log, err := report.NewMetricsLog(o.OutDir)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	sum := &report.Summary{Protocol: task.Protocol, Metrics: summaryMetrics(task)}
	timings := map[string]float64{"prefix_s": prefixSeconds}
	for _, method := range o.Methods {
		t0 := time.Now()
		var recs []report.RoundRecord
		switch method {
		case ZeroShot:
			recs, err = runZeroShot(ctx, env, log)
		case PFedMMA:
			recs, err = runPFedMMA(ctx, env, cfg, o, log)
		default:
			err = fmt.Errorf("experiment: method %q is not implemented (available: %s, %s)", method, ZeroShot, PFedMMA)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", method, err)
		}
		timings[method+"_s"] = time.Since(t0).Seconds()
		if len(recs) > 0 {
			sum.Set(method, finalMetrics(task, recs[len(recs)-1]))
		}
	}
	timings["total_s"] = time.Since(start).Seconds()
	sum.Timings = timings
	res := &Result{Summary: sum, Table: sum.Table(tableTitle(ds.Name, task)), Records: log.Records()}
	if err := writeReports(o, res); err != nil {
		return nil, err
	}
	return res, nil
}

func tableTitle(name string, t *Task) string {
	return fmt.Sprintf("%s — %s, %d clients", name, t.Protocol, len(t.Clients))
}

// summaryMetrics are the columns of the summary table.
func summaryMetrics(t *Task) []string {
	if t.Protocol == Domains {
		return append(append([]string{}, t.Dataset.Domains...), "avg")
	}
	return t.Metrics
}

// finalMetrics summarises the last round: client means, with HM of the means
// for base-to-novel, and per-domain means for the domains protocol.
func finalMetrics(t *Task, r report.RoundRecord) report.Metrics {
	out := report.Metrics{}
	switch t.Protocol {
	case BaseToNovel:
		for _, k := range []string{"local", "base", "novel"} {
			out[k] = r.Mean[k]
		}
		out["hm"] = hm(out["local"], out["base"], out["novel"])
	case Domains:
		sums, counts := map[int]float64{}, map[int]int{}
		dom := map[int]int{}
		for _, c := range t.Clients {
			dom[c.ID] = c.Domain
		}
		for _, c := range r.Clients {
			sums[dom[c.ID]] += c.Metrics["acc"]
			counts[dom[c.ID]]++
		}
		var avg float64
		for d, name := range t.Dataset.Domains {
			if counts[d] > 0 {
				out[name] = sums[d] / float64(counts[d])
				avg += out[name]
			}
		}
		out["avg"] = avg / float64(max(len(counts), 1))
	default:
		out["acc"] = r.Mean["acc"]
	}
	return out
}

// registerUncached switches the cache off: stores that recompute prefixes.
func (e *Env) registerUncached(views int) {
	test := &computeStore{p: e.Prefixer, items: e.Task.Test, seed: e.Seed}
	for _, i := range e.Task.UsedTest() {
		e.TestRecs[i] = test.add(view{item: i})
	}
	train := &computeStore{p: e.Prefixer, items: e.Task.Train, seed: e.Seed}
	for _, i := range e.Task.UsedTrain() {
		if views == 0 {
			e.TrainRecs[i] = []int{train.add(view{item: i})}
		}
		for v := 0; v < views; v++ {
			e.TrainRecs[i] = append(e.TrainRecs[i], train.add(view{item: i, index: v, augment: true}))
		}
	}
	e.TestStore, e.TrainStore = test, train
}

func (e *Env) fillTest(ctx context.Context, bar *progress.Bar) error {
	used := e.Task.UsedTest()
	vs := make([]view, len(used))
	for k, i := range used {
		vs[k] = view{item: i}
	}
	bar.Describe("test-image prefixes")
	recs, err := e.Prefixer.Fill(ctx, e.Task.Test, vs, e.Seed, e.TestStore, bar)
	if err != nil {
		return fmt.Errorf("test prefixes: %w", err)
	}
	for k, i := range used {
		e.TestRecs[i] = recs[k]
	}
	return nil
}

func (e *Env) fillTrain(ctx context.Context, views int, bar *progress.Bar) error {
	used := e.Task.UsedTrain()
	per := max(views, 1)
	vs := make([]view, 0, len(used)*per)
	for _, i := range used {
		if views == 0 {
			vs = append(vs, view{item: i})
		}
		for v := 0; v < views; v++ {
			vs = append(vs, view{item: i, index: v, augment: true})
		}
	}
	bar.Describe("training-view prefixes")
	recs, err := e.Prefixer.Fill(ctx, e.Task.Train, vs, e.Seed, e.TrainStore, bar)
	if err != nil {
		return fmt.Errorf("training prefixes: %w", err)
	}
	for k, i := range used {
		e.TrainRecs[i] = recs[k*per : (k+1)*per]
	}
	return nil
}

// runZeroShot evaluates frozen CLIP once per client (evaluation sets shared
// by clients are scored once).
func runZeroShot(ctx context.Context, env *Env, log *report.MetricsLog) ([]report.RoundRecord, error) {
	sc := &frozenScorer{env: env}
	done := map[*EvalSet]float64{}
	rec := report.RoundRecord{Round: 0, Method: ZeroShot}
	for _, c := range env.Task.Clients {
		m := report.Metrics{}
		for _, set := range c.Evals {
			acc, ok := done[set]
			if !ok {
				r, err := env.evaluate(ctx, sc, []*EvalSet{set})
				if err != nil {
					return nil, err
				}
				acc = r[set.Name]
				done[set] = acc
			}
			m[set.Name] = acc
		}
		if env.Task.Protocol == BaseToNovel {
			m["hm"] = hm(m["local"], m["base"], m["novel"])
		}
		rec.Clients = append(rec.Clients, report.ClientMetrics{ID: c.ID, Metrics: m})
	}
	rec.Mean = meanMetrics(rec.Clients)
	if err := log.Append(rec); err != nil {
		return nil, err
	}
	return []report.RoundRecord{rec}, nil
}

// meanMetrics averages client metrics; "hm" is recomputed as the harmonic
// mean of the averaged Local, Base and Novel (the paper's HM), not the mean
// of per-client HMs.
func meanMetrics(cs []report.ClientMetrics) report.Metrics {
	out := report.Metrics{}
	for _, c := range cs {
		for k, v := range c.Metrics {
			out[k] += v / float64(len(cs))
		}
	}
	if _, ok := out["hm"]; ok {
		out["hm"] = hm(out["local"], out["base"], out["novel"])
	}
	return out
}

// runPFedMMA trains pFedMMA through the federation engine.
func runPFedMMA(ctx context.Context, env *Env, cfg mma.Config, o Options, log *report.MetricsLog) ([]report.RoundRecord, error) {
	vc, tc := env.Model.W.Config.Vision, env.Model.W.Config.Text
	init := mma.New(cfg, vc.Width, tc.Width, rand.New(rand.NewPCG(o.Seed, 0x6d6d61)))
	views, _, _ := parseAugment(o.Augment)
	topts := o.Train
	topts.Views = views
	var clients []federation.Client
	byID := map[int]*mmaClient{}
	for i := range env.Task.Clients {
		c, err := newMMAClient(env, &env.Task.Clients[i], topts, init, o.Seed)
		if err != nil {
			return nil, err
		}
		clients = append(clients, c)
		byID[c.ID()] = c
	}
	shared := tensor.Named{}
	for name, p := range init.Params {
		if mma.IsShared(name) {
			shared[name] = p.Clone()
		}
	}
	strategy := &federation.FedAvg{Shared: mma.IsShared, Initial: shared}
	ckdir := filepath.Join(o.OutDir, "checkpoints", PFedMMA)
	if err := os.MkdirAll(ckdir, 0o755); err != nil {
		return nil, err
	}
	bar := progress.New(o.Progress, o.Rounds, "pFedMMA round", "round", progress.WithMode(o.ProgressMode))
	env.roundBar = bar
	defer func() { env.roundBar = nil }()
	var records []report.RoundRecord
	toRecord := func(r federation.RoundReport) report.RoundRecord {
		rec := report.RoundRecord{Round: r.Round, Method: PFedMMA, Seconds: r.Seconds}
		ids := make([]int, 0, len(r.Eval))
		for id := range r.Eval {
			ids = append(ids, id)
		}
		sort.Ints(ids)
		for _, id := range ids {
			m := report.Metrics{}
			for k, v := range r.Eval[id] {
				m[k] = v
			}
			if f, ok := r.Fit[id]; ok {
				m["loss"] = f["loss"]
			}
			rec.Clients = append(rec.Clients, report.ClientMetrics{ID: id, Metrics: m})
		}
		rec.Mean = meanMetrics(rec.Clients)
		return rec
	}
	sim := &federation.Simulation{
		Strategy: strategy, Clients: clients, Rounds: o.Rounds, Fraction: o.Fraction, Seed: o.Seed,
		EvalEvery: o.EvalEvery, CheckpointDir: ckdir,
		// one line per round is logged below, with the metrics
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnRound: func(r federation.RoundReport) error {
			bar.Add(1)
			if r.Eval == nil {
				return nil
			}
			rec := toRecord(r)
			records = append(records, rec)
			slog.Info("round", "method", PFedMMA, "round", r.Round, "metrics", fmtMetrics(rec.Mean))
			return log.Append(rec)
		},
	}
	var err error
	if o.Resume {
		// earlier rounds come from the checkpoint's history
		if ck, rerr := federation.ReadCheckpoint(filepath.Join(ckdir, federation.CheckpointFile)); rerr == nil {
			for _, r := range ck.History.Rounds {
				if r.Eval != nil {
					rec := toRecord(r)
					records = append(records, rec)
					if err := log.Append(rec); err != nil {
						return nil, err
					}
				}
				bar.Add(1)
			}
		}
		_, err = sim.Resume(ctx)
		if errors.Is(err, federation.ErrNoCheckpoint) {
			_, err = sim.Run(ctx)
		}
	} else {
		_, err = sim.Run(ctx)
	}
	bar.Finish()
	if err != nil {
		return nil, err
	}
	if o.SaveAdapters {
		if err := saveAdapters(o.OutDir, byID, strategy); err != nil {
			return nil, err
		}
	}
	return records, nil
}

func fmtMetrics(m report.Metrics) string {
	var parts []string
	for _, k := range m.Keys() {
		parts = append(parts, fmt.Sprintf("%s=%.2f", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// saveAdapters writes each client's personalised adapters and the global
// shared projections.
func saveAdapters(dir string, clients map[int]*mmaClient, s *federation.FedAvg) error {
	ad := filepath.Join(dir, "adapters")
	if err := os.MkdirAll(ad, 0o755); err != nil {
		return err
	}
	for id, c := range clients {
		a := c.learner.Adapters
		meta := map[string]string{"method": PFedMMA, "client": fmt.Sprint(id),
			"start": fmt.Sprint(a.Cfg.Start), "end": fmt.Sprint(a.Cfg.End), "dim": fmt.Sprint(a.Cfg.Dim), "scale": fmt.Sprint(a.Cfg.Scale)}
		if err := safetensors.Write(filepath.Join(ad, fmt.Sprintf("client_%03d.safetensors", id)), a.Params, nil, meta); err != nil {
			return err
		}
	}
	return safetensors.Write(filepath.Join(ad, "global_shared.safetensors"), s.Global(), nil, map[string]string{"method": PFedMMA})
}

// RunInfo is written to run.json: what `pfedmma predict` needs to rebuild a
// client's classifier.
type RunInfo struct {
	Model    string   `json:"model"`
	Vocab    string   `json:"vocab,omitempty"`
	Template string   `json:"template"`
	Dataset  string   `json:"dataset"`
	Protocol string   `json:"protocol"`
	Classes  []string `json:"classes"`
	Spaces   []Space  `json:"spaces"`
	// ClientSpace maps a client ID to the label space it was trained over.
	ClientSpace map[int]int `json:"client_space"`
	Adapters    mma.Config  `json:"adapters"`
}

// RunInfoFile is the name of the run description in an output folder.
const RunInfoFile = "run.json"

func writeRunInfo(o Options, task *Task, cfg mma.Config, tmpl string) error {
	info := RunInfo{Model: o.ModelPath, Vocab: o.VocabPath, Template: tmpl, Dataset: task.Dataset.Name,
		Protocol: task.Protocol, Classes: task.Dataset.Classes, Spaces: task.Spaces, ClientSpace: map[int]int{}, Adapters: cfg}
	for _, c := range task.Clients {
		info.ClientSpace[c.ID] = c.TrainSpace
	}
	if abs, err := filepath.Abs(info.Model); err == nil {
		info.Model = abs
	}
	data, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	return safetensors.WriteFileAtomic(filepath.Join(o.OutDir, RunInfoFile), func(w io.Writer) error {
		_, err := w.Write(append(data, '\n'))
		return err
	})
}

// ReadRunInfo reads run.json from a run's output folder.
func ReadRunInfo(dir string) (*RunInfo, error) {
	path := filepath.Join(dir, RunInfoFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", dir, err)
	}
	var info RunInfo
	if err := json.Unmarshal(data, &info); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(info.Classes) == 0 || len(info.Spaces) == 0 {
		return nil, fmt.Errorf("%s: no classes or label spaces", path)
	}
	return &info, nil
}
