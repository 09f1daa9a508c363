// Package rundir runs `pfedmma run` into its output folder: one run per
// seed of the configuration (experiment.Run), the folder's lock and
// marker, --resume of a stopped run and --force over an earlier one.
package rundir

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/internal/inputfile"
	"github.com/pfedmma/pfedmma/progress"
	"github.com/pfedmma/pfedmma/report"
	"github.com/pfedmma/pfedmma/runfiles"
)

// FingerprintFile holds the fingerprint of the configuration a run folder's
// run started with; --resume refuses another configuration.
const FingerprintFile = "fingerprint.txt"

// Config is one `pfedmma run`: an experiment run into a run folder.
type Config struct {
	Experiment *config.Experiment
	// Model is the checkpoint (the configuration's model, resolved).
	Model string
	// Out is the run folder (default: a new runs/<name>-<time>).
	Out string
	// Resume continues the run in Out from its checkpoints; Force clears
	// an earlier run in Out first (with Resume: starts a method whose
	// checkpoint is missing from round 0).
	Resume, Force bool
	// Progress receives the progress bars (nil: none).
	Progress     io.Writer
	ProgressMode progress.Mode
	// Stdout receives each seed's table and the closing line, Stderr the
	// notices.
	Stdout, Stderr io.Writer
}

// Run runs an experiment into a run folder, as `pfedmma run` does: it
// takes the folder's lock, checks (with Resume) that the configuration is
// the one the run started with, marks the folder as a run's, and runs
// every seed (each in seed_<n>/ when there are several, then their mean).
// A seed whose run ended is kept as it is when resumed. An interrupted run
// is resumed with the same configuration and Resume.
func Run(ctx context.Context, c Config) (err error) {
	e := c.Experiment
	out := c.Out
	if out == "" {
		if c.Resume {
			return errors.New("--resume needs --out pointing at the run to continue")
		}
		name := e.Name
		if name == "" {
			name = "run"
		}
		if out, err = NewDefault(name); err != nil {
			return err
		}
		defer func() {
			if err != nil && !errors.Is(err, context.Canceled) { // an interrupted run is resumed
				removeIfNotResumable(out)
			}
		}()
	}
	d := &runDir{dir: out, fingerprint: e.Fingerprint(), stderr: c.Stderr}
	unlock, done, err := d.open(c.Resume, c.Force)
	if err != nil || done {
		return err
	}
	defer unlock()
	summaries, err := runSeeds(ctx, c, out)
	if err != nil {
		return err
	}
	if err := d.finish(); err != nil {
		return err
	}
	files := "summary.json, report.md, curves.png"
	if len(summaries) > 0 && len(summaries[0].Metrics) >= 3 && slices.Equal(summaries[0].Metrics[:3], []string{"G", "P", "C"}) {
		files = "summary.json, report.md; each held-out domain's run in fold-<domain>/"
	}
	fmt.Fprintf(c.Stdout, "results in %s (%s)\n", out, files)
	return nil
}

// runSeeds runs every seed of c's experiment into out and writes their
// mean when there are several.
func runSeeds(ctx context.Context, c Config, out string) ([]*report.Summary, error) {
	seeds := c.Experiment.RunSeeds()
	var summaries []*report.Summary
	for _, seed := range seeds {
		dir := out
		if len(seeds) > 1 {
			dir = filepath.Join(out, fmt.Sprintf("seed_%d", seed))
		}
		if c.Resume && len(seeds) > 1 {
			// a seed whose run ended (its summary.json is written last)
			// is kept as it is, not run again
			if s, err := report.ReadSummary(filepath.Join(dir, report.SummaryFile)); err == nil {
				slog.Info("seed finished earlier: kept as it is", "seed", seed, "out", dir)
				summaries = append(summaries, s)
				continue
			}
		}
		o, err := experiment.FromConfig(c.Experiment, c.Model, seed, dir)
		if err != nil {
			return nil, err
		}
		o.Resume, o.Force, o.Progress, o.ProgressMode = c.Resume, c.Force, c.Progress, c.ProgressMode
		slog.Info("run", "out", dir, "seed", seed, "model", c.Model)
		res, err := experiment.Run(ctx, o)
		if errors.Is(err, context.Canceled) {
			return nil, fmt.Errorf("interrupted; continue it with: pfedmma run --resume --out %s (and the same config): %w", out, err)
		}
		if err != nil {
			return nil, err
		}
		summaries = append(summaries, res.Summary)
		fmt.Fprintln(c.Stdout, res.Table.Text())
	}
	if len(summaries) > 1 {
		avg, err := report.Average(summaries[0].Protocol, summaries...)
		if err != nil {
			return nil, err
		}
		if err := report.WriteSummary(filepath.Join(out, report.SummaryFile), avg); err != nil {
			return nil, err
		}
		fmt.Fprintln(c.Stdout, avg.Table(fmt.Sprintf("mean over %d seeds", len(summaries))).Text())
	}
	return summaries, nil
}

// runDir is a run folder while a run writes there.
type runDir struct {
	dir, fingerprint string
	stderr           io.Writer
	marker           RunMarker
}

// open makes the folder ready: for a fresh run it checks and (with force)
// clears it; for a resumed one it checks the fingerprint and whether the
// run ended already (done: nothing to do, said on stderr). It then takes
// the lock, checks again under it, and writes the marker and fingerprint.
func (d *runDir) open(resume, force bool) (unlock func(), done bool, err error) {
	if resume {
		if done, err := d.checkResume(); done || err != nil {
			return nil, done, err
		}
	} else if _, err := checkRunDir(d.dir, force); err != nil {
		// before the lock file is written into a folder that is not a run
		return nil, false, err
	}
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return nil, false, err
	}
	unlock, err = Lock(d.dir)
	if err != nil {
		return nil, false, err
	}
	defer func() {
		if err != nil || done {
			unlock()
		}
	}()
	if resume {
		// again, now that no other run can change the folder
		if done, err := d.checkResume(); done || err != nil {
			return nil, done, err
		}
	} else if err := prepareRunDir(d.dir, force); err != nil {
		return nil, false, err
	}
	m, ok, err := ReadRunMarker(d.dir)
	if err != nil {
		return nil, false, err
	}
	d.marker = m
	if !ok || !resume {
		d.marker = RunMarker{Fingerprint: d.fingerprint, Started: time.Now().UTC().Format(time.RFC3339)}
		if err := WriteRunMarker(d.dir, d.marker); err != nil {
			return nil, false, err
		}
	}
	if err := os.WriteFile(filepath.Join(d.dir, FingerprintFile), []byte(d.fingerprint+"\n"), 0o644); err != nil {
		return nil, false, err
	}
	return unlock, false, nil
}

// checkResume refuses resuming with another configuration and says
// whether the run ended already (resuming would only rewrite its outputs).
func (d *runDir) checkResume() (done bool, err error) {
	old, err := inputfile.ReadFile(filepath.Join(d.dir, FingerprintFile))
	if err != nil {
		return false, fmt.Errorf("--resume %s: %w", d.dir, err)
	}
	if strings.TrimSpace(string(old)) != d.fingerprint {
		return false, fmt.Errorf("--resume %s: the configuration differs from the one the run started with (fingerprint %s, now %s); --config %s resumes it with the settings it started with (a run from before train.drop_last reads there as false, the run it was)",
			d.dir, strings.TrimSpace(string(old)), d.fingerprint, filepath.Join(d.dir, "config.yaml"))
	}
	when, done, err := runFinished(d.dir)
	if err != nil {
		return false, fmt.Errorf("--resume %s: %w", d.dir, err)
	}
	if done {
		fmt.Fprintf(d.stderr, "the run in %s finished (%s); --resume has nothing to do and changed nothing. To run it again: --force (or a new --out)\n", d.dir, when)
	}
	return done, nil
}

// finish marks the run as ended.
func (d *runDir) finish() error {
	d.marker.Finished = time.Now().UTC().Format(time.RFC3339)
	return WriteRunMarker(d.dir, d.marker)
}

// NewDefault creates and returns a new folder runs/<name>-<time>,
// with a suffix -2, -3, … when a run of the same name started in the same
// second (the folder is created exclusively, so two runs never share it).
func NewDefault(name string) (string, error) {
	if err := os.MkdirAll("runs", 0o755); err != nil {
		return "", err
	}
	base := filepath.Join("runs", name+"-"+time.Now().Format("20060102-150405"))
	for i := 1; i <= 1000; i++ {
		dir := base
		if i > 1 {
			dir = fmt.Sprintf("%s-%d", base, i)
		}
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("%s: a thousand runs of this name started this second; give --out", base)
}

// removeIfNotResumable removes a default run folder (one this invocation
// created) after a failure that left nothing to resume: no run.json, so
// the run stopped before its first method started. An interrupted run
// keeps its folder for --resume.
func removeIfNotResumable(dir string) {
	if _, err := os.Stat(filepath.Join(dir, runfiles.InfoFile)); err == nil {
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		slog.Warn("could not remove the failed run's folder", "folder", dir, "err", err)
	}
}

// UseModel points e at the checkpoint model (its resolved path: path) and
// adjusts the method sections to its depth, logging each change. model ""
// is the embedded default.
func UseModel(e *config.Experiment, model, path string) error {
	info, err := checkpoint.Inspect(path)
	if err != nil {
		return err
	}
	e.Model = model
	for _, c := range e.FitModel(min(info.Config.Vision.Layers, info.Config.Text.Layers)) {
		slog.Info("adjusted for the model", "model", path, "change", c)
	}
	return e.Validate()
}
