package experiment

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pfedmma/pfedmma/clip"
	"github.com/pfedmma/pfedmma/compress"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/gemm"
	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/internal/memlimit"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/methods/train"
	"github.com/pfedmma/pfedmma/progress"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/report"
	"github.com/pfedmma/pfedmma/runfiles"
	"github.com/pfedmma/pfedmma/session"
	"github.com/pfedmma/pfedmma/tokenizer"
)

// Options is a fully resolved experiment.
type Options struct {
	// countRound is told of every round of the run, also those a resumed
	// run replays from its checkpoints (the summary's bytes per round).
	countRound func(method string, r federation.RoundReport)

	ModelPath, VocabPath string
	Dataset, Root        string
	DatasetOptions       dataset.Options
	Protocol             protocol.Options
	// Methods are run in this order on the same clients and data; each
	// finds its settings in Sections under its name.
	Methods  []string
	Sections map[string]config.Section
	Train    train.Options
	// DropLast names the methods that train with each epoch's partial last
	// batch dropped (train.drop_last, resolved per method by FromConfig);
	// session.Build sets Train.DropLast of each method's own env from it.
	DropLast map[string]bool
	Rounds   int
	Fraction float64
	// DropRate is FLiP's client drop rate (federation.client_drop_rate)
	// and PersonalEval its personal accuracy (eval.personal): see
	// federation.Coordinator.
	DropRate     float64
	PersonalEval bool
	// EvalEvery evaluates after rounds k-1, 2k-1, … and the last (≤ 1:
	// every round).
	EvalEvery int
	// Compress encodes every message's tensors (federation.compress); the
	// simulation applies the encoding as the wire does (compressProxy).
	Compress compress.Codec
	// Augment is "none", "views:K" or "online".
	Augment string
	// NoCache recomputes every prefix whenever it is needed instead of
	// caching it (for checking the cache; much slower).
	NoCache  bool
	Template string
	Seed     uint64
	// CacheMiB bounds the RAM of the prefix caches (0: half the available
	// memory); beyond it records spill to a memory-mapped file in SpillDir
	// (default: temp).
	CacheMiB int
	SpillDir string
	// Precision of the frozen weights' products (gemm.FP32 or gemm.BF16).
	Precision gemm.Precision
	// CacheBF16 stores cached prefixes as bfloat16 (half the memory; the
	// computation stays float32, the prefixes lose precision: relative
	// error ≤ 2⁻⁸).
	CacheBF16 bool
	// EvalBatch is the batch size of prefix computation and evaluation
	// (default 32).
	EvalBatch int
	OutDir    string
	Resume    bool
	// ValidationOnly scores the clients on their validation sets only
	// (protocol.validation > 0): no test image is cached or scored, and
	// the summary's one metric is "val". Tuning runs this way.
	ValidationOnly bool
	// Force lets Resume start a method from round 0 when its checkpoint is
	// missing (without it, that is an error naming the file).
	Force bool
	// Progress receives progress bars (nil: none).
	Progress     io.Writer
	ProgressMode progress.Mode
	SaveAdapters bool
	Plots        bool
	// ConfigYAML, when set, is written to OutDir/config.yaml.
	ConfigYAML []byte
	// OnRound, when set, is told of every finished federated round
	// (benchmarks read its phase timings).
	OnRound func(method string, r federation.RoundReport)
	// OnEvaluate, when set, is told of every client evaluation with the
	// logits of each of the client's evaluation sets (methods.Observer's
	// OnEvaluate): conformance tests compare them with `pfedmma predict`.
	OnEvaluate func(method string, c *protocol.ClientTask, logits [][]float32)
	// OnTrainBatch, when set, is told of every training batch a client of
	// a method loads (methods.Observer.OnTrainBatch): tests count the batches
	// an epoch steps.
	OnTrainBatch func(method string, c *protocol.ClientTask, batch []int)
	// EvaluateAlone evaluates every client on its own even where its
	// method can evaluate the clients together (federation.GroupEvaluator):
	// the same results, slower; benchmarks and tests compare the two.
	EvaluateAlone bool

	// Aggregation hardens every trained method's aggregation (robust
	// rules, clipping, differential privacy; off when zero).
	Aggregation config.Aggregation

	// SecureAggregation aggregates with secure aggregation
	// (federation.secure_aggregation; see checkSecure).
	SecureAggregation bool
}

// Result is what Run produced.
type Result struct {
	Summary *report.Summary
	Table   report.Table
	Records []report.RoundRecord
	// Task is the clients and evaluation sets the run used (nil for a
	// run over several leave-one-domain-out folds).
	Task *protocol.Task
	// OutDir is the folder the outputs were written to.
	OutDir string
}

// writeConfig writes o.ConfigYAML, when set, to config.yaml in the output
// folder.
func writeConfig(o Options) error {
	if o.ConfigYAML == nil {
		return nil
	}
	if err := atomicfile.WriteBytes(filepath.Join(o.OutDir, "config.yaml"), o.ConfigYAML); err != nil {
		return fmt.Errorf("experiment: %w", err)
	}
	return nil
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

// Run executes the experiment: load → task → frozen prefixes → for each
// method: its federation → reports.
func Run(ctx context.Context, o Options) (*Result, error) {
	start := time.Now()
	if err := checkRunOptions(o); err != nil {
		return nil, err
	}
	if (o.Protocol.Name == protocol.LeaveOneDomainOut || o.Protocol.Name == protocol.DomainGeneralization) && o.Protocol.HeldOut == "" {
		return runFolds(ctx, o)
	}
	s, err := startRunDir(o)
	if err != nil {
		return nil, err
	}
	task := s.task
	keys, envs, closeEnvs, err := openEnvs(ctx, o, s)
	if err != nil {
		return nil, err
	}
	defer closeEnvs()
	prefixSeconds := time.Since(start).Seconds()

	log, err := report.NewMetricsLog(o.OutDir)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	sum, err := runMethods(ctx, o, s, envs, keys, log)
	if err != nil {
		return nil, err
	}
	sum.Timings["prefix_s"] = prefixSeconds
	sum.Timings["total_s"] = time.Since(start).Seconds()
	res := &Result{Summary: sum, Table: sum.Table(tableTitle(s.ds.Name, task)), Records: log.Records(), Task: task, OutDir: o.OutDir}
	if err := writeReports(o, res); err != nil {
		return nil, err
	}
	return res, nil
}

// checkRunOptions refuses, before any work starts, an augmentation it cannot
// parse, a run without an output folder and a method not registered.
func checkRunOptions(o Options) error {
	if _, _, err := parseAugment(o.Augment); err != nil {
		return err
	}
	if o.OutDir == "" {
		return errors.New("experiment: no output folder")
	}
	// Every method must exist before any work starts.
	for _, name := range o.Methods {
		if _, err := methods.Get(name); err != nil {
			return fmt.Errorf("experiment: %w", err)
		}
	}
	return nil
}

// startRunDir makes the output folder, writes the configuration, sets the
// run up (dataset, task, methods) and writes run.json.
func startRunDir(o Options) (*setup, error) {
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("experiment: %w", err)
	}
	if err := writeConfig(o); err != nil {
		return nil, err
	}
	s, err := newSetup(o, o.Methods)
	if err != nil {
		return nil, err
	}
	if err := writeRunInfo(o, s.task, s.tmpl); err != nil {
		return nil, err
	}
	return s, nil
}

// openEnvs checks the run's memory estimate, loads the model and fills one
// cache of frozen prefixes per depth (and record kind) the methods need;
// methods of any depth (zero-shot) share the first. It returns each
// method's cache key, the environments by key and the function that closes
// their stores (already called when it fails).
func openEnvs(ctx context.Context, o Options, s *setup) ([]cacheKey, map[cacheKey]*methods.Env, func(), error) {
	task := s.task
	anyDepth := s.layers
	if s.resNet {
		anyDepth = methods.Features
	}
	keys, distinct := s.keys(anyDepth)
	budget := cacheBudget(o.CacheMiB) / int64(2*len(distinct)) // train and test store per depth
	if err := checkMemory(estimateMemory(o, s.model.Config, s.model.Params, task, distinct, s.views, s.online, budget), memlimit.AvailableMiB()); err != nil {
		return nil, nil, nil, fmt.Errorf("experiment: %w", err)
	}
	m, tok, err := LoadModel(o.ModelPath, o.VocabPath)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := m.SetPrecision(o.Precision); err != nil {
		return nil, nil, nil, err
	}
	nViews := len(task.UsedTest())
	if !s.online {
		nViews += len(task.UsedTrain()) * max(s.views, 1)
	}
	root := progress.New(o.Progress, nViews*len(distinct), "frozen prefixes", "img", progress.WithMode(o.ProgressMode))
	envs := map[cacheKey]*methods.Env{}
	var opened []*methods.Env
	closeEnvs := func() { // in the reverse order of opening, each test store before its train store
		for i := len(opened) - 1; i >= 0; i-- {
			session.CloseEnv(opened[i])
		}
	}
	for _, d := range distinct {
		env, err := session.NewEnv(ctx, o.frozen(m, tok, task, s.tmpl, d, s.views, s.online, budget, root))
		if err != nil {
			closeEnvs()
			return nil, nil, nil, err
		}
		opened = append(opened, env)
		envs[d] = env
	}
	root.Finish()
	slog.Info("experiment", "dataset", s.ds.Name, "protocol", task.Protocol, "clients", len(task.Clients),
		"train", len(task.UsedTrain()), "test", len(task.UsedTest()), "depths", depthsOf(distinct))
	return keys, envs, closeEnvs, nil
}

// runMethods runs each method's federation in turn, logging its rounds,
// and returns the summary: each method's final metrics, the timings per
// method, the bytes per site and round, and the privacy accounting.
func runMethods(ctx context.Context, o Options, s *setup, envs map[cacheKey]*methods.Env, keys []cacheKey, log *report.MetricsLog) (*report.Summary, error) {
	task := s.task
	sum := &report.Summary{Protocol: task.Protocol, Metrics: summaryMetrics(task)}
	timings := map[string]float64{}
	// bytes each site sends and receives per round, averaged over every
	// round of the run — those a resumed run replays from its checkpoints
	// too
	bytes := newSiteBytes(len(task.Clients))
	bytes.codec = o.Compress
	o.countRound = bytes.add
	var lastRecords []report.RoundRecord // each method's, for the summary's dp
	if err := checkAggregation(o, s.methods, envs, keys); err != nil {
		return nil, err
	}
	for i, meth := range s.methods {
		name := o.Methods[i]
		t0 := time.Now()
		recs, err := runMethod(ctx, o, envs[keys[i]], meth, name, log)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		timings[name+"_s"] = time.Since(t0).Seconds()
		if len(recs) > 0 {
			sum.Set(name, finalMetrics(task, recs[len(recs)-1]))
			lastRecords = append(lastRecords, recs[len(recs)-1])
		}
	}
	sum.Timings = timings
	sum.Extra = bytes.extra()
	for _, rec := range lastRecords {
		addPrivacy(o, sum, rec.Method, rec)
	}
	return sum, nil
}

// backboneFits rejects a method whose depth needs the ViT's blocks or
// tokens on a ResNet CLIP (methods.RunsOnResNet).
func backboneFits(resNet bool, meth methods.Method, depth int) error {
	if resNet && !methods.RunsOnResNet(meth, depth) {
		what := fmt.Sprintf("runs blocks %d.. of a ViT image encoder", depth)
		if depth == methods.TokenFeatures || depth == methods.Embeddings {
			what = "needs the image encoder's patch tokens"
		}
		return fmt.Errorf("method %s %s; the model is a ResNet CLIP (use a ViT checkpoint, or a method that runs on a ResNet: %s)", meth.Info().Name, what, strings.Join(featureMethods(), ", "))
	}
	return nil
}

// featureMethods lists the registered methods that run on a ResNet CLIP
// with their default settings: on image features, or on the attention
// pool's tokens (methods.RunsOnResNet).
func featureMethods() []string {
	var out []string
	for _, m := range methods.All() {
		d, err := m.Depth(m.DefaultConfig(), 12)
		if err == nil && methods.RunsOnResNet(m, d) {
			out = append(out, m.Info().Name)
		}
	}
	return out
}

// depthsOf lists the depths of cache keys, a split one as "ℓ+split".
func depthsOf(keys []cacheKey) []string {
	var out []string
	for _, k := range keys {
		s := strconv.Itoa(k.depth)
		if k.split {
			s += "+split"
		}
		out = append(out, s)
	}
	return out
}

// frozen describes the frozen env of cache key on the setup's model, task
// and template: the prefixes of depth ℓ = key.depth, split records when
// key.split; the stores hold budget bytes each in RAM (nil bar: no cache,
// the coordinator's env).
func (o Options) frozen(m *clip.Model, tok *tokenizer.Tokenizer, task *protocol.Task, tmpl string,
	key cacheKey, views int, online bool, budget int64, bar *progress.Bar) session.Frozen {
	f := session.Frozen{Model: m, Tok: tok, Task: task, Template: tmpl, Depth: key.depth, Split: key.split, Seed: o.Seed,
		Train: o.Train, Views: views, Online: online, EvalBatch: o.EvalBatch}
	if bar != nil {
		f.Cache = &session.Cache{Budget: budget, SpillDir: o.SpillDir, BF16: o.CacheBF16, NoCache: o.NoCache, Bar: bar}
	}
	return f
}

// observer is what the runner watches of method name's clients: the
// evaluations' logits for o.OnEvaluate.
func observer(o Options, name string) *methods.Observer {
	obs := &methods.Observer{}
	if o.OnEvaluate != nil {
		obs.OnEvaluate = func(c *protocol.ClientTask, logits [][]float32) { o.OnEvaluate(name, c, logits) }
	}
	if o.OnTrainBatch != nil {
		obs.OnTrainBatch = func(c *protocol.ClientTask, batch []int) { o.OnTrainBatch(name, c, batch) }
	}
	return obs
}

// session is method name's session on env: its settings, the run's
// federation and the training loader its authors use (train.drop_last).
func (o Options) session(meth methods.Method, env *methods.Env, name string) session.Config {
	return session.Config{Env: env, Method: meth, Settings: o.Sections[name], Federation: o.Federation(), DropLast: o.DropLast[name]}
}

// runMethod runs one method's federation (or, for a method that does not
// train, one evaluation of every client) and logs its rounds.
func runMethod(ctx context.Context, o Options, env *methods.Env, meth methods.Method, name string, log *report.MetricsLog) ([]report.RoundRecord, error) {
	obs := observer(o, name)
	ctx = methods.WithObserver(ctx, obs)
	sess, err := session.Build(o.session(meth, env, name))
	if err != nil {
		return nil, err
	}
	plan, coord := sess.Plan, sess.Coordinator
	if coord == nil {
		return evaluateOnce(ctx, env, plan, name, log)
	}
	ckdir := filepath.Join(o.OutDir, "checkpoints", name)
	// A method whose folder exists had started before the run stopped.
	_, serr := os.Stat(ckdir)
	started := serr == nil
	if err := os.MkdirAll(ckdir, 0o755); err != nil {
		return nil, err
	}
	m := &methodRun{ctx: ctx, o: o, env: env, plan: plan, name: name, log: log,
		bar: progress.New(o.Progress, o.Rounds, name+" round", "round", progress.WithMode(o.ProgressMode))}
	obs.RoundBar = m.bar
	m.global = len(env.Task.GlobalEvals) > 0 && plan.GlobalScorer != nil
	if len(env.Task.GlobalEvals) > 0 && !m.global {
		slog.Warn("method has no global model: the held-out / unseen sets are not scored", "method", name)
	}
	store := federation.FileStore{Path: filepath.Join(ckdir, federation.CheckpointFile)}
	coord.Proxies, coord.Store = m.proxies(ckdir), store
	// one line per round is logged below, with the metrics
	coord.Logger = slog.New(slog.DiscardHandler)
	coord.OnRound = m.onRound
	if o.Resume {
		var refused error
		if err, refused = m.resume(coord, store, started); refused != nil {
			return nil, refused
		}
	} else {
		_, err = coord.Run(ctx)
	}
	m.bar.Finish()
	if err != nil {
		return nil, err
	}
	if o.SaveAdapters {
		if err := saveSites(o.OutDir, name, plan); err != nil {
			return nil, err
		}
	}
	return m.records, nil
}

// methodRun is one method's federation in a run: what its rounds are
// logged to and the records they made.
type methodRun struct {
	ctx     context.Context
	o       Options
	env     *methods.Env
	plan    *methods.Plan
	name    string
	log     *report.MetricsLog
	bar     *progress.Bar
	global  bool // the global model is scored at every evaluated round
	records []report.RoundRecord
}

// proxies are the plan's clients as the coordinator calls them, each with
// its state folder under ckdir.
func (m *methodRun) proxies(ckdir string) []federation.ClientProxy {
	proxies := make([]federation.ClientProxy, len(m.plan.Clients))
	for i, c := range m.plan.Clients {
		proxies[i] = m.o.Federation().Proxy(federation.NewSite(c, filepath.Join(ckdir, fmt.Sprintf("site-%03d", c.ID()))))
	}
	return proxies
}

// onRound counts a round's bytes and, for an evaluated round, scores the
// global model when there is one and logs the round's record.
func (m *methodRun) onRound(r federation.RoundReport) error {
	m.bar.Add(1)
	if m.o.countRound != nil {
		m.o.countRound(m.name, r)
	}
	if m.o.OnRound != nil {
		m.o.OnRound(m.name, r)
	}
	if r.Eval == nil {
		return nil
	}
	rec := RoundRecord(m.name, r)
	if m.global {
		// the global model (held-out domain, unseen writers) at
		// every evaluated round
		sc, err := m.plan.GlobalScorer()
		if err != nil {
			return fmt.Errorf("global model: %w", err)
		}
		if err := scoreGlobal(m.ctx, m.env, sc, &rec); err != nil {
			return err
		}
	}
	m.records = append(m.records, rec)
	slog.Info("round", "method", m.name, "round", r.Round, "metrics", fmtMetrics(rec.Mean))
	return m.log.Append(rec)
}

// resume continues the method from its checkpoint, the earlier rounds
// coming from the checkpoint's history; a method that had not started
// (or, with --force, lost its checkpoint) runs from round 0. err is the
// federation's (or the checkpoint's) error; refused, a resume refused
// before it ran (a missing checkpoint, a record not logged).
func (m *methodRun) resume(coord *federation.Coordinator, store federation.FileStore, started bool) (err, refused error) {
	ck, lerr := store.Load()
	switch {
	case errors.Is(lerr, federation.ErrNoCheckpoint) && (m.o.Force || !started):
		if started {
			slog.Warn("no checkpoint to resume (--force): starting from round 0", "method", m.name, "checkpoint", store.Path)
		} else {
			slog.Info("method had not started: running it from round 0", "method", m.name)
		}
		_, err = coord.Run(m.ctx)
	case errors.Is(lerr, federation.ErrNoCheckpoint):
		return nil, fmt.Errorf("resume: checkpoint %s is missing (deleted, or the run stopped before its first round ended); --force starts %s again from round 0", store.Path, m.name)
	case lerr != nil:
		err = lerr
	default:
		for _, r := range ck.History.Rounds {
			if m.o.countRound != nil {
				m.o.countRound(m.name, r)
			}
			if r.Eval != nil {
				rec := RoundRecord(m.name, r)
				m.records = append(m.records, rec)
				if err := m.log.Append(rec); err != nil {
					return nil, err
				}
			}
			m.bar.Add(1)
		}
		_, err = coord.Resume(m.ctx)
	}
	return err, nil
}

// scoreGlobal scores a method's global model on the task's GlobalEvals (the
// held-out domain, unseen writers) and adds the metrics to rec's mean.
func scoreGlobal(ctx context.Context, env *methods.Env, sc eval.Scorer, rec *report.RoundRecord) error {
	acc := make([]float64, len(env.Task.GlobalEvals))
	for i, e := range env.Task.GlobalEvals {
		recs := make([]int, len(e.Images))
		for k, img := range e.Images {
			recs[k] = env.TestRecs[img]
		}
		m, err := env.Evaluator.Accuracy(ctx, sc, []eval.Set{{Name: e.Name, Space: e.Space, Records: recs, Labels: e.Labels}})
		if err != nil {
			return fmt.Errorf("global model: %w", err)
		}
		acc[i] = m[e.Name]
	}
	g, err := env.Task.GlobalMetrics(acc)
	if err != nil {
		return err
	}
	if rec.Mean == nil {
		rec.Mean = report.Metrics{}
	}
	maps.Copy(rec.Mean, g)
	return nil
}

// evaluateOnce scores every client of a method that does not train (and
// frozen CLIP on the global sets) and records it as round 0.
func evaluateOnce(ctx context.Context, env *methods.Env, plan *methods.Plan, name string, log *report.MetricsLog) ([]report.RoundRecord, error) {
	rec := report.RoundRecord{Round: 0, Method: name}
	for _, c := range plan.Clients {
		res, err := c.Evaluate(ctx, federation.EvaluateIns{Round: 0})
		if err != nil {
			return nil, fmt.Errorf("client %d: %w", c.ID(), err)
		}
		rec.Clients = append(rec.Clients, report.ClientMetrics{ID: c.ID(), Metrics: res.Metrics})
	}
	rec.Mean = clientMean(rec.Clients)
	if len(env.Task.GlobalEvals) > 0 {
		if err := scoreGlobal(ctx, env, &methods.FrozenScorer{Env: env}, &rec); err != nil {
			return nil, err
		}
	}
	if err := log.Append(rec); err != nil {
		return nil, err
	}
	return []report.RoundRecord{rec}, nil
}

// saveSites writes what each site of plan keeps and the server's shared
// tensors, in the reference's names, to the run folder dir.
func saveSites(dir, name string, plan *methods.Plan) error {
	if plan.Site != nil {
		for i, c := range plan.Clients {
			params, err := plan.Site(i)
			if err != nil {
				return err
			}
			if err := runfiles.WriteSite(dir, name, c.ID(), params, nil); err != nil {
				return err
			}
		}
	}
	if plan.Global != nil {
		return runfiles.WriteGlobal(dir, name, plan.Global())
	}
	return nil
}
