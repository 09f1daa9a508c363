package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/internal/inputfile"
	"github.com/pfedmma/pfedmma/progress"
	"github.com/pfedmma/pfedmma/report"
	_ "github.com/pfedmma/pfedmma/world" // the generated "world" dataset
)

func init() {
	var cfgPath, preset, out, modelFlag string
	var sets []string
	var resume, force, quiet, listPresets bool
	cmd := &cobra.Command{
		Use:   "run [--config exp.yaml] [--preset NAME] [--set path=value]... [--out DIR] [--resume] [--force]",
		Short: "Run a federated experiment (default: base-to-novel on the generated world with the embedded tiny CLIP)",
		Long: "Run a federated experiment described by a YAML config and/or a preset; with no arguments the\n" +
			"default preset (" + config.DefaultPreset + ") runs offline in about ten seconds on 2 cores.\n" +
			"Outputs: config.yaml, metrics.jsonl/csv, summary.json, report.md, curves.png, final.png,\n" +
			"adapters/*.safetensors and checkpoints/ (for --resume).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if listPresets {
				for _, p := range config.Presets() {
					fmt.Fprintf(cmd.OutOrStdout(), "%-18s %s\n", p.Name, p.Summary)
				}
				return nil
			}
			if cfgPath == "" && preset == "" {
				preset = config.DefaultPreset
			}
			e, err := config.Compose(config.Sources{Preset: preset, File: cfgPath, Sets: sets})
			if err != nil {
				return err
			}
			if modelFlag != "" {
				if err := useModel(e, modelFlag); err != nil {
					return fmt.Errorf("run: --model: %w", err)
				}
			}
			return runExperiment(cmd, e, out, resume, force, quiet)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfgPath, "config", "", "experiment YAML (see config/example.yaml)")
	f.StringVar(&preset, "preset", "", "start from a preset: "+strings.Join(config.PresetNames(), ", "))
	f.StringArrayVar(&sets, "set", nil, "override a field, e.g. --set federation.rounds=3 (repeatable)")
	f.StringVar(&out, "out", "", "output folder (default runs/<name>-<time>)")
	f.BoolVar(&resume, "resume", false, "continue a killed run in --out from its last checkpoint")
	f.BoolVar(&force, "force", false, "clear a non-empty --out holding an earlier run first; with --resume, start a method whose checkpoint is missing from round 0")
	f.BoolVar(&quiet, "quiet", false, "no progress bars")
	f.StringVar(&modelFlag, "model", "", "run on this checkpoint instead of the configuration's model; \"embedded\" is the tiny model in the binary. Method settings a shallower model lacks (pFedMMA's start block) are adjusted, and each change is logged")
	f.BoolVar(&listPresets, "list-presets", false, "list the presets and exit")
	rootCmd.AddCommand(cmd)
}

const fingerprintFile = "fingerprint.txt"

// useModel points e at a model ("embedded": the one in the binary) and
// adjusts the method sections to its depth, logging each change.
func useModel(e *config.Experiment, model string) error {
	if model == "embedded" {
		model = ""
	}
	path, err := resolveModelPath(model)
	if err != nil {
		return err
	}
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

func runExperiment(cmd *cobra.Command, e *config.Experiment, out string, resume, force, quiet bool) (err error) {
	if e.Threads > 0 {
		setThreads(e.Threads)
	}
	if out == "" {
		if resume {
			return errors.New("run: --resume needs --out pointing at the run to continue")
		}
		name := e.Name
		if name == "" {
			name = "run"
		}
		if out, err = newDefaultRunDir(name); err != nil {
			return fmt.Errorf("run: %w", err)
		}
		defer func() {
			if err != nil && !errors.Is(err, context.Canceled) { // an interrupted run is resumed
				removeIfNotResumable(out)
			}
		}()
	}
	fp := e.Fingerprint()
	checkResume := func() error {
		old, err := inputfile.ReadFile(filepath.Join(out, fingerprintFile))
		if err != nil {
			return fmt.Errorf("run: --resume %s: %w", out, err)
		}
		if strings.TrimSpace(string(old)) != fp {
			return fmt.Errorf("run: --resume %s: the configuration differs from the one the run started with (fingerprint %s, now %s)", out, strings.TrimSpace(string(old)), fp)
		}
		return nil
	}
	// finishedRun says whether --resume has nothing to do: the run ended,
	// and resuming would only rewrite its outputs.
	finishedRun := func() (bool, error) {
		when, done, err := runFinished(out)
		if err != nil {
			return false, fmt.Errorf("run: --resume %s: %w", out, err)
		}
		if done {
			fmt.Fprintf(cmd.ErrOrStderr(), "the run in %s finished (%s); --resume has nothing to do and changed nothing. To run it again: --force (or a new --out)\n", out, when)
		}
		return done, nil
	}
	if resume {
		if err := checkResume(); err != nil {
			return err
		}
		if done, err := finishedRun(); done || err != nil {
			return err
		}
	}
	model, err := resolveModelPath(e.Model)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	if !resume {
		// before the lock file is written into a folder that is not a run
		if _, err := checkRunDir(out, force); err != nil {
			return fmt.Errorf("run: %w", err)
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	unlock, err := lockRunDir(out)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	defer unlock()
	if resume {
		// again, now that no other run can change the folder
		if err := checkResume(); err != nil {
			return err
		}
		if done, err := finishedRun(); done || err != nil {
			return err
		}
	} else if err := prepareRunDir(out, force); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	marker, hasMarker, err := readRunMarker(out)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	if !hasMarker || !resume {
		marker = runMarker{Fingerprint: fp, Started: time.Now().UTC().Format(time.RFC3339)}
		if err := writeRunMarker(out, marker); err != nil {
			return fmt.Errorf("run: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(out, fingerprintFile), []byte(fp+"\n"), 0o644); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	mode := progress.Auto
	if quiet {
		mode = progress.Quiet
	}
	seeds := e.RunSeeds()
	var summaries []*report.Summary
	for _, seed := range seeds {
		dir := out
		if len(seeds) > 1 {
			dir = filepath.Join(out, fmt.Sprintf("seed_%d", seed))
		}
		if resume && len(seeds) > 1 {
			// a seed whose run ended (its summary.json is written last)
			// is kept as it is, not run again
			if s, err := report.ReadSummary(filepath.Join(dir, report.SummaryFile)); err == nil {
				slog.Info("seed finished earlier: kept as it is", "seed", seed, "out", dir)
				summaries = append(summaries, s)
				continue
			}
		}
		o, err := experiment.FromConfig(e, model, seed, dir)
		if err != nil {
			return fmt.Errorf("run: %w", err)
		}
		o.Resume, o.Force, o.Progress, o.ProgressMode = resume, force, os.Stderr, mode
		slog.Info("run", "out", dir, "seed", seed, "model", model)
		res, err := experiment.Run(cmd.Context(), o)
		if errors.Is(err, context.Canceled) {
			return fmt.Errorf("run interrupted; continue it with: pfedmma run --resume --out %s (and the same config): %w", out, err)
		}
		if err != nil {
			return fmt.Errorf("run: %w", err)
		}
		summaries = append(summaries, res.Summary)
		fmt.Fprintln(cmd.OutOrStdout(), res.Table.Text())
	}
	if len(summaries) > 1 {
		avg, err := report.Average(summaries[0].Protocol, summaries...)
		if err != nil {
			return err
		}
		if err := report.WriteSummary(filepath.Join(out, "summary.json"), avg); err != nil {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), avg.Table(fmt.Sprintf("mean over %d seeds", len(summaries))).Text())
	}
	marker.Finished = time.Now().UTC().Format(time.RFC3339)
	if err := writeRunMarker(out, marker); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	files := "summary.json, report.md, curves.png"
	if len(summaries) > 0 && len(summaries[0].Metrics) >= 3 && slices.Equal(summaries[0].Metrics[:3], []string{"G", "P", "C"}) {
		files = "summary.json, report.md; each held-out domain's run in fold-<domain>/"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "results in %s (%s)\n", out, files)
	return nil
}

// newDefaultRunDir creates and returns a new folder runs/<name>-<time>,
// with a suffix -2, -3, … when a run of the same name started in the same
// second (the folder is created exclusively, so two runs never share it).
func newDefaultRunDir(name string) (string, error) {
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
	if _, err := os.Stat(filepath.Join(dir, experiment.RunInfoFile)); err == nil {
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		slog.Warn("could not remove the failed run's folder", "folder", dir, "err", err)
	}
}
