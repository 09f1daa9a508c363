package experiment

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/memlimit"
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/progress"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/report"
	"github.com/pfedmma/pfedmma/runfiles"
	"github.com/pfedmma/pfedmma/session"
	"github.com/pfedmma/pfedmma/tensor"
)

// Federated is one trained method of an experiment, prepared for a
// federation over the network: the coordinator uses its Strategy, a site
// its one Client. Both sides build it from the same configuration, so the
// strategy's initial tensors and each client's initial state are the ones
// `pfedmma run` would use: serve + sites give the simulation's results.
type Federated struct {
	Name   string
	Method methods.Method
	Task   *protocol.Task
	Plan   *methods.Plan
	// Dataset names the data the task was built from.
	Dataset string
	// SiteNames names the sites in the outputs (client i is SiteNames[i];
	// "client i" when empty).
	SiteNames []string
	template  string
	close     func()
	// observer watches the clients (o.OnEvaluate) when set.
	observer *methods.Observer
}

// Close releases the prefix caches.
func (f *Federated) Close() {
	if f.close != nil {
		f.close()
	}
}

// Spec maps every tensor a client may upload to its shape: the strategy's
// global tensors ("global/<name>" of its initial state; the coordinator
// initialises the strategy again before the first round) and the per-client
// tensors the plan declares (Plan.Uploads).
func (f *Federated) Spec() (map[string][]int, error) {
	infos := make([]federation.ClientInfo, len(f.Plan.Clients))
	for i, c := range f.Plan.Clients {
		infos[i] = federation.ClientInfo{ID: c.ID(), NumExamples: c.NumExamples()}
	}
	if err := f.Plan.Strategy.Init(infos); err != nil {
		return nil, err
	}
	out := map[string][]int{}
	for k, t := range f.Plan.Strategy.State() {
		if name, ok := strings.CutPrefix(k, "global/"); ok {
			out[name] = slices.Clone(t.Shape)
		}
	}
	for name, shape := range f.Plan.Uploads {
		out[name] = slices.Clone(shape)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: the strategy holds no global tensors to validate uploads against", f.Name)
	}
	return out, nil
}

// TrainedMethod returns the one trained method of a configuration's list
// (methods that declare themselves methods.Frozen, such as zero-shot, are
// allowed beside it and ignored): a federation runs one method.
func TrainedMethod(names []string) (string, error) {
	var trained []string
	for _, n := range names {
		m, err := methods.Get(n)
		if err != nil {
			return "", err
		}
		if methods.Trains(m) {
			trained = append(trained, n)
		}
	}
	if len(trained) != 1 {
		return "", fmt.Errorf("a federation runs one trained method; methods lists %v (set methods=[NAME])", names)
	}
	return trained[0], nil
}

// PrepareFederated builds the method's federation from o, on the setup
// `pfedmma run` uses (the same methods, model, data set and task). For the
// coordinator (site < 0) no image is read and no cache is filled: the
// strategy needs the model, the label spaces and the seeds only. For site
// i, the prefixes are computed as `pfedmma run` computes them (the same
// batches, hence bit-identical features under any BLAS kernel) and the plan
// keeps client i alone.
func PrepareFederated(ctx context.Context, o Options, site int) (*Federated, error) {
	name, err := TrainedMethod(o.Methods)
	if err != nil {
		return nil, err
	}
	s, err := newSetup(o, []string{name})
	if err != nil {
		return nil, err
	}
	meth, depth, task := s.methods[0], s.depths[0], s.task
	key := cacheKey{depth, s.splits[0]}
	if depth == methods.AnyDepth {
		return nil, fmt.Errorf("%s does not train: nothing to federate", name)
	}
	if site >= len(task.Clients) {
		return nil, fmt.Errorf("site %d: the federation has clients 0..%d", site, len(task.Clients)-1)
	}
	m, tok, err := LoadModel(o.ModelPath, o.VocabPath)
	if err != nil {
		return nil, err
	}
	if err := m.SetPrecision(o.Precision); err != nil {
		return nil, err
	}
	f := &Federated{Name: name, Method: meth, Task: task, Dataset: s.ds.Name, template: s.tmpl}
	var bar *progress.Bar // the site's: the coordinator reads no image
	if site >= 0 {
		// the memory estimate of `pfedmma run` (the weights, loaded
		// already, are out of what is available)
		need := estimateMemory(o, m.W.Config, 0, task, []cacheKey{key}, s.views, s.online, cacheBudget(o.CacheMiB)/2)
		if err := checkMemory(need, memlimit.AvailableMiB()); err != nil {
			return nil, fmt.Errorf("site %d: %w", site, err)
		}
		bar = progress.New(o.Progress, 0, "frozen prefixes", "img", progress.WithMode(o.ProgressMode))
	}
	env, err := session.NewEnv(ctx, o.frozen(m, tok, task, s.tmpl, key, s.views, s.online, cacheBudget(o.CacheMiB)/2, bar))
	if bar != nil {
		bar.Finish()
	}
	if err != nil {
		return nil, err
	}
	f.close = func() { session.CloseEnv(env) }
	f.observer = observer(o, name)
	sess, err := session.Build(o.session(meth, env, name))
	if err != nil {
		f.Close()
		return nil, err
	}
	plan := sess.Plan
	if plan.Strategy == nil {
		f.Close()
		return nil, fmt.Errorf("%s does not train: nothing to federate", name)
	}
	f.Plan = plan
	return f, nil
}

// Client returns site i's client.
func (f *Federated) Client(i int) federation.Client {
	if f.observer == nil || f.observer.OnEvaluate == nil {
		return f.Plan.Clients[i]
	}
	return methods.Observed(f.Plan.Clients[i], f.observer)
}

// WriteSite writes what site i keeps (its personalised parameters) to
// dir/sites/<method>/client_NNN.safetensors, the file `pfedmma run` writes
// for that site; meta is added to the file's metadata.
func (f *Federated) WriteSite(dir string, i int, meta map[string]string) error {
	params, err := f.SiteParams(i)
	if err != nil {
		return err
	}
	return runfiles.WriteSite(dir, f.Name, f.Plan.Clients[i].ID(), params, meta)
}

// SiteParams returns what site i keeps (its personalised parameters).
func (f *Federated) SiteParams(i int) (tensor.Named, error) {
	if f.Plan.Site == nil {
		return tensor.Named{}, nil
	}
	return f.Plan.Site(i)
}

// WriteFederationReports writes the coordinator's outputs after the last
// round, as `pfedmma run` writes them: config.yaml and run.json,
// metrics.jsonl/csv, summary.json, report.md and the figures, and the
// server's global tensors (global/<method>.safetensors). Each site keeps
// its own file under the same name, sites/<method>/client_NNN.safetensors,
// in its state folder.
func WriteFederationReports(o Options, f *Federated, hist *federation.History) (*Result, error) {
	o.Methods = []string{f.Name} // the one method that ran
	log, err := report.NewMetricsLog(o.OutDir)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	if err := writeConfig(o); err != nil {
		return nil, err
	}
	if err := writeServedRunInfo(o, f.Task, f.template); err != nil {
		return nil, err
	}
	var last report.RoundRecord
	for _, r := range hist.Rounds {
		if r.Eval == nil {
			continue
		}
		last = RoundRecord(f.Name, r)
		if err := log.Append(last); err != nil {
			return nil, err
		}
	}
	sum := &report.Summary{Protocol: f.Task.Protocol, Metrics: summaryMetrics(f.Task)}
	if last.Method != "" {
		sum.Set(f.Name, finalMetrics(f.Task, last))
	}
	bytes := newSiteBytes(len(f.Task.Clients))
	bytes.codec = o.Compress
	for _, r := range hist.Rounds {
		bytes.add(f.Name, r)
	}
	sum.Extra = bytes.extra()
	addPrivacy(o, sum, f.Name, last)
	title := tableTitle(f.Dataset, f.Task)
	if over, ok := addAbsences(sum, f.Name, hist.Rounds, len(f.Task.Clients), siteNames(f.SiteNames)); ok && (len(over.Absent) > 0 || len(over.Departed) > 0) {
		title += fmt.Sprintf(" (round %d: %s)", over.Round, over.Text)
	}
	res := &Result{Summary: sum, Table: sum.Table(title), Records: log.Records(), Task: f.Task, OutDir: o.OutDir}
	if err := writeReports(o, res); err != nil {
		return nil, err
	}
	if f.Plan.Global != nil {
		if err := runfiles.WriteGlobal(o.OutDir, f.Name, f.Plan.Global()); err != nil {
			return nil, err
		}
	}
	return res, nil
}
