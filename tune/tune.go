// Package tune searches a method's settings on the validation split
// (protocol.validation): `pfedmma tune`. Every trial is one experiment run
// per seed in which the clients are scored on their validation images only
// (no test image is cached or scored); the trial with the highest mean
// validation accuracy is chosen and written as a preset fragment (--set
// lines and YAML). A killed tune continues where it stopped: finished
// trials (and finished seeds of a trial) are read back, not run again.
package tune

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/internal/inputfile"
	"github.com/pfedmma/pfedmma/progress"
	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/report"
)

// Help is `pfedmma tune --help`'s description.
const Help = "Runs every grid point (or --trials N of them drawn at random) as an experiment of the method alone,\n" +
	"scored on each client's validation images only (protocol.validation; 0.2 when the configuration holds\n" +
	"nothing out; no test image is read), and writes in --out: tune.md and tune.png (every trial, the chosen\n" +
	"one marked), chosen.sets and chosen.yaml (its settings as --set lines and as a preset fragment),\n" +
	"trials.json, and each trial's runs under trials/NNN/seed_S/. Run the same command again to continue\n" +
	"a killed tune: finished trials are read back, an interrupted run resumes from its checkpoints.\n\n" +
	"  pfedmma tune --preset world-compare --method clip_lora --grid clip_lora.lr=1e-3,5e-3 --out tunes/lora"

// DefaultValidation is the protocol.validation a tune uses when the
// configuration holds nothing out (and the user did not set 0 explicitly).
const DefaultValidation = 0.2

// Output file names in the tune's folder.
const (
	PlanFile     = "tune.json"    // what is searched (checked on resume)
	TableFile    = "tune.md"      // every trial, the chosen one marked
	PlotFile     = "tune.png"     // validation accuracy of every trial
	TrialsFile   = "trials.json"  // every trial's settings and scores
	ChosenYAML   = "chosen.yaml"  // the chosen settings as YAML
	ChosenSets   = "chosen.sets"  // the chosen settings as --set lines
	trialDone    = "trial.json"   // in trials/NNN/ once every seed ran
	trialsFolder = "trials"       // trials/NNN/seed_S/: each run
	summaryName  = "summary.json" // a finished run's summary
	keyValSep    = "="            // --grid key=v1,v2
	valuesSep    = ','            // between a grid key's values
	trialDirFmt  = "%03d"         // trials/NNN
	seedDirFmt   = "seed_%d"      // trials/NNN/seed_S
	validKey     = "protocol.validation"
	gridFlag     = "--grid"
	trialsFlag   = "--trials"
	defaultTitle = "pfedmma tune"
)

// Param is one searched key and the values it takes.
type Param struct {
	Key    string   `json:"key"`
	Values []string `json:"values"`
}

// Setting is one key's value in a trial.
type Setting struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// ParseGrid reads --grid flags: key=v1,v2,… (commas inside [...] belong to
// one value). Keys must differ and be configuration keys; keys that would
// make the search read something other than its validation images
// (protocol.validation, eval.split, seed, seeds) are refused.
func ParseGrid(specs []string) ([]Param, error) {
	var out []Param
	for _, s := range specs {
		key, vals, ok := strings.Cut(s, keyValSep)
		key = strings.TrimSpace(key)
		if !ok || key == "" || strings.TrimSpace(vals) == "" {
			return nil, fmt.Errorf("%s %q: want key=v1,v2,… (e.g. optimizer.lr=0.01,0.05)", gridFlag, s)
		}
		switch key {
		case validKey, "eval.split", "seed", "seeds", "methods":
			return nil, fmt.Errorf("%s %s: not a tunable key (tuning keeps it fixed)", gridFlag, key)
		}
		if slices.ContainsFunc(out, func(p Param) bool { return p.Key == key }) {
			return nil, fmt.Errorf("%s %s: given twice", gridFlag, key)
		}
		p := Param{Key: key}
		for _, v := range splitValues(vals) {
			v = strings.TrimSpace(v)
			if v == "" {
				return nil, fmt.Errorf("%s %s: an empty value in %q", gridFlag, key, vals)
			}
			if slices.Contains(p.Values, v) {
				return nil, fmt.Errorf("%s %s: value %s listed twice", gridFlag, key, v)
			}
			p.Values = append(p.Values, v)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s: give at least one key=v1,v2,…", gridFlag)
	}
	return out, nil
}

// splitValues splits on commas outside brackets.
func splitValues(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, r := range s {
		switch {
		case r == '[' || r == '{':
			depth++
		case r == ']' || r == '}':
			depth--
		case r == valuesSep && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// Options configure a tune.
type Options struct {
	// Preset, ConfigFile and Sets give the base configuration as for
	// `pfedmma run` (--preset, --config, --set).
	Preset, ConfigFile string
	Sets               []string
	// Method is the method tuned; the runs train it alone.
	Method string
	Grid   []Param
	// Trials > 0 runs that many grid points drawn at random (seeded by
	// SampleSeed, without repetition) instead of the whole grid.
	Trials     int
	SampleSeed uint64
	// Seeds each trial runs with (its score is the mean); empty: the
	// configuration's seeds.
	Seeds []uint64
	// Out is the tune's folder.
	Out string
	// ResolveModel turns the configuration's model ("" = the embedded
	// one) into a path.
	ResolveModel func(string) (string, error)
	// Progress receives the progress bar (nil: none).
	Progress     io.Writer
	ProgressMode progress.Mode
	// OnTrial, when set, is told of every trial that finished running in
	// this call (not of trials read back from an earlier one).
	OnTrial func(Trial)
}

// Trial is one point of the search.
type Trial struct {
	Index    int       `json:"trial"` // 1-based, in plan order
	Settings []Setting `json:"settings"`
	// Val is the mean validation accuracy (%) over Seeds; PerSeed the
	// runs' own.
	Val     float64   `json:"val"`
	Seeds   []uint64  `json:"seeds"`
	PerSeed []float64 `json:"val_per_seed"`
	Seconds float64   `json:"seconds"`
}

// Plan is what a tune searches; tune.json records it, and a resumed tune
// must find the same.
type Plan struct {
	Preset      string      `json:"preset,omitempty"`
	ConfigFile  string      `json:"config,omitempty"`
	Sets        []string    `json:"sets,omitempty"`
	Method      string      `json:"method"`
	Grid        []Param     `json:"grid"`
	Trials      int         `json:"trials,omitempty"`
	SampleSeed  uint64      `json:"sample_seed,omitempty"`
	Seeds       []uint64    `json:"seeds"`
	Validation  float64     `json:"validation"`
	Defaulted   bool        `json:"validation_defaulted,omitempty"`
	Fingerprint string      `json:"base_fingerprint"`
	Points      [][]Setting `json:"points"`
}

// Result is a finished tune.
type Result struct {
	Plan   Plan
	Trials []Trial
	// Best is the index into Trials of the chosen trial (highest Val; the
	// earliest on a tie).
	Best int
	// Reused counts the trials read back from an earlier, interrupted call.
	Reused int
}

// Chosen returns the chosen trial.
func (r *Result) Chosen() Trial { return r.Trials[r.Best] }

// Run composes the base configuration, plans the trials, runs those not yet
// finished in o.Out, and writes the table, the plot and the chosen settings.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Out == "" {
		return nil, errors.New("tune: no output folder (--out)")
	}
	if o.ResolveModel == nil {
		return nil, errors.New("tune: no model resolver")
	}
	base, plan, err := planOf(o)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, fmt.Errorf("tune: %w", err)
	}
	if err := checkOrWritePlan(o.Out, plan); err != nil {
		return nil, err
	}
	if plan.Defaulted {
		slog.Info("tune: protocol.validation was 0; tuning holds out a share of each client's training images",
			"protocol.validation", plan.Validation)
	}
	model, err := o.ResolveModel(base.Model)
	if err != nil {
		return nil, fmt.Errorf("tune: %w", err)
	}
	res := &Result{Plan: plan}
	bar := progress.New(o.Progress, len(plan.Points)*len(plan.Seeds), "tune "+plan.Method, "run", progress.WithMode(o.ProgressMode))
	for i, pt := range plan.Points {
		dir := filepath.Join(o.Out, trialsFolder, fmt.Sprintf(trialDirFmt, i+1))
		if tr, ok := readTrial(dir); ok && slices.Equal(tr.Seeds, plan.Seeds) {
			res.Trials = append(res.Trials, tr)
			res.Reused++
			bar.Add(len(plan.Seeds))
			continue
		}
		bar.Describe(fmt.Sprintf("tune %s trial %d/%d %s", plan.Method, i+1, len(plan.Points), label(pt)))
		tr, err := runTrial(ctx, base, model, plan, i, pt, dir, bar)
		if err != nil {
			bar.Finish()
			return nil, fmt.Errorf("tune: trial %d (%s): %w", i+1, label(pt), err)
		}
		res.Trials = append(res.Trials, tr)
		if o.OnTrial != nil {
			o.OnTrial(tr)
		}
	}
	bar.Finish()
	for i, t := range res.Trials {
		if t.Val > res.Trials[res.Best].Val || (math.IsNaN(res.Trials[res.Best].Val) && !math.IsNaN(t.Val)) {
			res.Best = i
		}
	}
	if err := writeOutputs(o.Out, res); err != nil {
		return nil, err
	}
	return res, nil
}

// planOf composes the base configuration (the method alone, a validation
// split) and lists the trials.
func planOf(o Options) (*config.Experiment, Plan, error) {
	if o.Preset == "" && o.ConfigFile == "" {
		o.Preset = config.DefaultPreset
	}
	e, err := config.Compose(config.Sources{Preset: o.Preset, File: o.ConfigFile, Sets: o.Sets})
	if err != nil {
		return nil, Plan{}, fmt.Errorf("tune: %w", err)
	}
	if o.Method == "" {
		return nil, Plan{}, errors.New("tune: no --method")
	}
	if !slices.Contains(config.Methods(), o.Method) {
		return nil, Plan{}, fmt.Errorf("tune: --method %s: unknown method (known: %s)", o.Method, strings.Join(config.Methods(), ", "))
	}
	e.Methods = []string{o.Method}
	e.Output = config.Output{} // trials write their metrics and summary only
	plan := Plan{Preset: o.Preset, ConfigFile: o.ConfigFile, Sets: o.Sets, Method: o.Method, Grid: o.Grid,
		Trials: o.Trials, SampleSeed: o.SampleSeed}
	if e.Protocol.Validation == 0 {
		if setsKey(o.Sets, validKey) {
			return nil, Plan{}, fmt.Errorf("tune: --set %s=0: tuning reads the validation split only; give a fraction in (0, 1) (or leave it out: tune then uses %v)", validKey, DefaultValidation)
		}
		e.Protocol.Validation = DefaultValidation
		plan.Defaulted = true
	}
	plan.Validation = e.Protocol.Validation
	if len(o.Grid) == 0 {
		return nil, Plan{}, fmt.Errorf("tune: no %s: give at least one key=v1,v2,…", gridFlag)
	}
	if o.Trials < 0 {
		return nil, Plan{}, fmt.Errorf("tune: %s %d is negative", trialsFlag, o.Trials)
	}
	plan.Seeds = slices.Clone(o.Seeds)
	if len(plan.Seeds) == 0 {
		plan.Seeds = e.RunSeeds()
	}
	for i, s := range plan.Seeds {
		if slices.Index(plan.Seeds, s) < i {
			return nil, Plan{}, fmt.Errorf("tune: --seeds: seed %d given twice", s)
		}
	}
	plan.Fingerprint = e.Fingerprint()
	points := gridPoints(o.Grid)
	if o.Trials > 0 && o.Trials < len(points) {
		rng := rand.New(rand.NewPCG(o.SampleSeed, 0x7e57))
		pick := rng.Perm(len(points))[:o.Trials]
		slices.Sort(pick) // plan order: the grid's
		sub := make([][]Setting, len(pick))
		for i, k := range pick {
			sub[i] = points[k]
		}
		points = sub
	}
	// every point must make a valid configuration before anything runs
	for _, pt := range points {
		if _, err := withSettings(e, pt); err != nil {
			return nil, Plan{}, err
		}
	}
	plan.Points = points
	return e, plan, nil
}

// setsKey reports whether a --set line sets key.
func setsKey(sets []string, key string) bool {
	for _, s := range sets {
		if k, _, ok := strings.Cut(s, "="); ok && strings.TrimSpace(k) == key {
			return true
		}
	}
	return false
}

// gridPoints is the Cartesian product of the grid, the first key slowest.
func gridPoints(grid []Param) [][]Setting {
	points := [][]Setting{nil}
	for _, p := range grid {
		var next [][]Setting
		for _, pt := range points {
			for _, v := range p.Values {
				next = append(next, append(slices.Clip(pt), Setting{p.Key, v}))
			}
		}
		points = next
	}
	return points
}

// withSettings returns a copy of e with a trial's settings applied and
// validated.
func withSettings(e *config.Experiment, pt []Setting) (*config.Experiment, error) {
	c := e.Clone()
	for _, s := range pt {
		if err := c.Set(s.Key, s.Value); err != nil {
			return nil, fmt.Errorf("tune: %s %s: %w", gridFlag, s.Key, err)
		}
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("tune: %s %s: %w", gridFlag, label(pt), err)
	}
	return c, nil
}

// label is "key=value key=value".
func label(pt []Setting) string {
	parts := make([]string, len(pt))
	for i, s := range pt {
		parts[i] = s.Key + "=" + s.Value
	}
	return strings.Join(parts, " ")
}

// checkOrWritePlan writes tune.json, or checks that the one already in dir
// describes the same search.
func checkOrWritePlan(dir string, plan Plan) error {
	want, err := json.MarshalIndent(plan, "", "  ")
	if err != nil {
		return fmt.Errorf("tune: %w", err)
	}
	path := filepath.Join(dir, PlanFile)
	old, err := inputfile.ReadFile(path)
	switch {
	case err == nil:
		if strings.TrimSpace(string(old)) != strings.TrimSpace(string(want)) {
			return fmt.Errorf("tune: %s describes another search (preset, method, grid, seeds or configuration differ); continue it with the same flags, or give another --out", path)
		}
		slog.Info("tune: continuing the search in its folder", "out", dir)
		return nil
	case errors.Is(err, os.ErrNotExist):
		return atomicfile.WriteBytes(path, append(want, '\n'))
	default:
		return fmt.Errorf("tune: %w", err)
	}
}

// readTrial reads a finished trial's trial.json.
func readTrial(dir string) (Trial, bool) {
	data, err := os.ReadFile(filepath.Join(dir, trialDone))
	if err != nil {
		return Trial{}, false
	}
	var t Trial
	if err := json.Unmarshal(data, &t); err != nil {
		slog.Warn("tune: unreadable trial record; running the trial again", "file", filepath.Join(dir, trialDone), "err", err)
		return Trial{}, false
	}
	return t, true
}

// runTrial runs a trial's seeds (a seed whose run finished is read back, one
// that stopped midway is resumed from its checkpoints) and records it.
func runTrial(ctx context.Context, base *config.Experiment, model string, plan Plan, i int, pt []Setting, dir string, bar *progress.Bar) (Trial, error) {
	t0 := time.Now()
	e, err := withSettings(base, pt)
	if err != nil {
		return Trial{}, err
	}
	tr := Trial{Index: i + 1, Settings: pt, Seeds: plan.Seeds}
	for _, seed := range plan.Seeds {
		sdir := filepath.Join(dir, fmt.Sprintf(seedDirFmt, seed))
		v, err := runSeed(ctx, e, model, plan.Method, seed, sdir)
		if err != nil {
			return Trial{}, fmt.Errorf("seed %d: %w", seed, err)
		}
		tr.PerSeed = append(tr.PerSeed, v)
		bar.Add(1)
	}
	var sum float64
	for _, v := range tr.PerSeed {
		sum += v
	}
	tr.Val = sum / float64(len(tr.PerSeed))
	tr.Seconds = time.Since(t0).Seconds()
	data, err := json.MarshalIndent(tr, "", "  ")
	if err != nil {
		return Trial{}, err
	}
	if err := atomicfile.WriteBytes(filepath.Join(dir, trialDone), append(data, '\n')); err != nil {
		return Trial{}, err
	}
	slog.Info("tune: trial", "trial", tr.Index, "settings", label(pt), "val", fmt.Sprintf("%.2f", tr.Val))
	return tr, nil
}

// runSeed runs (or reads back, or resumes) one seed of a trial on the
// validation images only and returns the method's validation accuracy.
func runSeed(ctx context.Context, e *config.Experiment, model, method string, seed uint64, dir string) (float64, error) {
	sumPath := filepath.Join(dir, summaryName)
	if s, err := report.ReadSummary(sumPath); err == nil {
		return valOf(s, method, sumPath)
	}
	_, statErr := os.Stat(dir)
	o, err := experiment.FromConfig(e, model, seed, dir)
	if err != nil {
		return 0, err
	}
	o.ValidationOnly = true
	o.Plots, o.SaveAdapters = false, false
	o.Resume, o.Force = statErr == nil, true // an interrupted run continues from its checkpoints
	res, err := experiment.Run(ctx, o)
	if err != nil {
		return 0, err
	}
	return valOf(res.Summary, method, sumPath)
}

func valOf(s *report.Summary, method, path string) (float64, error) {
	m, ok := s.Get(method)
	if !ok {
		return 0, fmt.Errorf("%s: no result for %s", path, method)
	}
	v, ok := m[protocol.ValidationMetric]
	if !ok {
		return 0, fmt.Errorf("%s: no validation accuracy for %s", path, method)
	}
	return v, nil
}

// Sets returns the chosen settings as --set lines.
func (r *Result) Sets() []string {
	var out []string
	for _, s := range r.Chosen().Settings {
		out = append(out, "--set "+s.Key+"="+s.Value)
	}
	return out
}

// YAML returns the chosen settings as a configuration fragment: the keys
// nested as in a config file (a method's keys under its section).
func (r *Result) YAML() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# chosen by pfedmma tune --method %s on protocol.validation %v (mean validation accuracy %.2f%%)\n",
		r.Plan.Method, r.Plan.Validation, r.Chosen().Val)
	// grouped by section, so that no mapping key repeats
	settings := slices.Clone(r.Chosen().Settings)
	slices.SortStableFunc(settings, func(a, b Setting) int {
		return slices.Compare(strings.Split(a.Key, "."), strings.Split(b.Key, "."))
	})
	var prev []string
	for _, s := range settings {
		path := strings.Split(s.Key, ".")
		common := 0
		for common < len(prev)-1 && common < len(path)-1 && prev[common] == path[common] {
			common++
		}
		for d := common; d < len(path)-1; d++ {
			fmt.Fprintf(&b, "%s%s:\n", strings.Repeat("  ", d), path[d])
		}
		fmt.Fprintf(&b, "%s%s: %s\n", strings.Repeat("  ", len(path)-1), path[len(path)-1], yamlScalar(s.Value))
		prev = path
	}
	return b.String()
}

// yamlScalar writes a value plain when YAML reads it back as the same text
// or number, else quoted.
func yamlScalar(v string) string {
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return v
	}
	if strings.HasPrefix(v, "[") || strings.ContainsAny(v, ":#{}&*!|>'\"%@`") || v != strings.TrimSpace(v) {
		if strings.HasPrefix(v, "[") && strings.HasSuffix(v, "]") {
			return v
		}
		return strconv.Quote(v)
	}
	return v
}

// Markdown is the tune table as Markdown: one row per trial (its settings,
// each seed's and the mean validation accuracy), the chosen one in bold.
func (r *Result) Markdown() string {
	var b strings.Builder
	var head []string
	head = append(head, "trial")
	for _, p := range r.Plan.Grid {
		head = append(head, "`"+p.Key+"`")
	}
	if len(r.Plan.Seeds) > 1 {
		for _, s := range r.Plan.Seeds {
			head = append(head, fmt.Sprintf("val (seed %d)", s))
		}
	}
	head = append(head, "val (mean)")
	fmt.Fprintf(&b, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat(" --- |", len(head)))
	for i, t := range r.Trials {
		row := []string{strconv.Itoa(t.Index)}
		for _, s := range t.Settings {
			row = append(row, s.Value)
		}
		if len(r.Plan.Seeds) > 1 {
			for _, v := range t.PerSeed {
				row = append(row, fmt.Sprintf("%.2f", v))
			}
		}
		row = append(row, fmt.Sprintf("%.2f", t.Val))
		if i == r.Best {
			for k := range row {
				row[k] = "**" + row[k] + "**"
			}
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(row, " | "))
	}
	return b.String()
}

// Text is the tune table for a terminal, then the chosen settings and
// where the outputs are.
func (r *Result) Text() string {
	s := r.table() + fmt.Sprintf("chosen: %s\n", strings.Join(r.Sets(), " "))
	if r.Plan.Defaulted {
		s += fmt.Sprintf("(protocol.validation was 0: tune held out %v of each client's training images)\n", r.Plan.Validation)
	}
	return s
}

// table is every trial's settings and validation accuracy, aligned.
func (r *Result) table() string {
	var b strings.Builder
	w := []int{5}
	for _, p := range r.Plan.Grid {
		n := len(p.Key)
		for _, v := range p.Values {
			n = max(n, len(v))
		}
		w = append(w, n)
	}
	fmt.Fprintf(&b, "%-*s", w[0], "trial")
	for k, p := range r.Plan.Grid {
		fmt.Fprintf(&b, "  %-*s", w[k+1], p.Key)
	}
	b.WriteString("     val\n")
	for i, t := range r.Trials {
		fmt.Fprintf(&b, "%-*d", w[0], t.Index)
		for k, s := range t.Settings {
			fmt.Fprintf(&b, "  %-*s", w[k+1], s.Value)
		}
		fmt.Fprintf(&b, "  %6.2f", t.Val)
		if i == r.Best {
			b.WriteString("  ← chosen")
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// writeOutputs writes trials.json, tune.md, tune.png, chosen.yaml and
// chosen.sets.
func writeOutputs(dir string, r *Result) error {
	data, err := json.MarshalIndent(struct {
		Plan   Plan    `json:"plan"`
		Trials []Trial `json:"trials"`
		Chosen int     `json:"chosen"`
	}{r.Plan, r.Trials, r.Chosen().Index}, "", "  ")
	if err != nil {
		return fmt.Errorf("tune: %w", err)
	}
	if err := atomicfile.WriteBytes(filepath.Join(dir, TrialsFile), append(data, '\n')); err != nil {
		return err
	}
	var md strings.Builder
	fmt.Fprintf(&md, "# %s: %s\n\n", defaultTitle, r.Plan.Method)
	fmt.Fprintf(&md, "Base configuration: preset `%s`", r.Plan.Preset)
	if r.Plan.ConfigFile != "" {
		fmt.Fprintf(&md, ", config `%s`", r.Plan.ConfigFile)
	}
	for _, s := range r.Plan.Sets {
		fmt.Fprintf(&md, ", `--set %s`", s)
	}
	fmt.Fprintf(&md, ". Scored on the clients' validation images only (`protocol.validation: %v`", r.Plan.Validation)
	if r.Plan.Defaulted {
		md.WriteString(", chosen by tune: the configuration held nothing out")
	}
	fmt.Fprintf(&md, "), mean over seeds %v; no test image is read.\n\n", r.Plan.Seeds)
	md.WriteString(r.Markdown())
	fmt.Fprintf(&md, "\nChosen: trial %d (%s), validation accuracy %.2f%%.\n\n```\n%s\n```\n\n```yaml\n%s```\n\n![validation accuracy per trial](%s)\n",
		r.Chosen().Index, label(r.Chosen().Settings), r.Chosen().Val, strings.Join(r.Sets(), " "), r.YAML(), PlotFile)
	if err := atomicfile.WriteBytes(filepath.Join(dir, TableFile), []byte(md.String())); err != nil {
		return err
	}
	if err := atomicfile.WriteBytes(filepath.Join(dir, ChosenYAML), []byte(r.YAML())); err != nil {
		return err
	}
	if err := atomicfile.WriteBytes(filepath.Join(dir, ChosenSets), []byte(strings.Join(r.Sets(), "\n")+"\n")); err != nil {
		return err
	}
	return r.Plot(filepath.Join(dir, PlotFile))
}

// Plot draws every trial's validation accuracy as a bar chart (PNG), the
// bars labelled with the trials' values in grid-key order.
func (r *Result) Plot(path string) error {
	keys := make([]string, len(r.Plan.Grid))
	for i, p := range r.Plan.Grid {
		keys[i] = p.Key
	}
	c := report.BarChart{Title: fmt.Sprintf("%s: validation accuracy (%s)", r.Plan.Method, strings.Join(keys, " / ")), YLabel: "Validation accuracy (%)"}
	vals := report.BarSeries{Name: "val"}
	for _, t := range r.Trials {
		vs := make([]string, len(t.Settings))
		for i, s := range t.Settings {
			vs[i] = s.Value
		}
		c.Groups = append(c.Groups, strings.Join(vs, " / "))
		vals.Values = append(vals.Values, t.Val)
	}
	c.Bars = []report.BarSeries{vals}
	return c.WritePNG(path, max(480, 90*len(r.Trials)+200), 420)
}
