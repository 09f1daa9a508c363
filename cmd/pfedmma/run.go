package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/progress"
	"github.com/pfedmma/pfedmma/rundir"
	_ "github.com/pfedmma/pfedmma/world" // the generated "world" dataset
)

func init() {
	var x experimentFlags
	var c rundir.Config
	var modelFlag string
	var quiet, listPresets bool
	cmd := &cobra.Command{
		Use:   "run [--config exp.yaml] [--preset NAME] [--set path=value]... [--out DIR] [--resume] [--force]",
		Short: "Run a federated experiment (default: base-to-novel on the generated world with the embedded tiny CLIP)",
		Long: "Run a federated experiment described by a YAML config and/or a preset; with no arguments the\n" +
			"default preset (" + config.DefaultPreset + ") runs offline in about ten seconds on 2 cores.\n" +
			"Outputs: config.yaml, run.json, metrics.jsonl/csv, summary.json, report.md, curves.png, final.png,\n" +
			"sites/METHOD/client_NNN.safetensors, global/METHOD.safetensors and checkpoints/ (for --resume).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if listPresets {
				for _, p := range config.Presets() {
					fmt.Fprintf(cmd.OutOrStdout(), "%-18s %s\n", p.Name, p.Summary)
				}
				return nil
			}
			var err error
			if c.Experiment, c.Model, err = x.compose(); err != nil {
				return err
			}
			if modelFlag != "" {
				if c.Model, err = useModel(c.Experiment, modelFlag); err != nil {
					return fmt.Errorf("run: --model: %w", err)
				}
			}
			if c.Experiment.Threads > 0 {
				setThreads(c.Experiment.Threads)
			}
			c.Progress, c.ProgressMode, c.Stdout, c.Stderr = os.Stderr, progress.Auto, cmd.OutOrStdout(), cmd.ErrOrStderr()
			if quiet {
				c.ProgressMode = progress.Quiet
			}
			if err := rundir.Run(cmd.Context(), c); err != nil {
				return fmt.Errorf("run: %w", err)
			}
			return nil
		},
	}
	x.add(cmd)
	f := cmd.Flags()
	f.StringVar(&c.Out, "out", "", "output folder (default runs/<name>-<time>)")
	f.BoolVar(&c.Resume, "resume", false, "continue a killed run in --out from its last checkpoint")
	f.BoolVar(&c.Force, "force", false, "clear a non-empty --out holding an earlier run first; with --resume, start a method whose checkpoint is missing from round 0")
	f.BoolVar(&quiet, "quiet", false, "no progress bars")
	f.StringVar(&modelFlag, "model", "", "run on this checkpoint instead of the configuration's model; \"embedded\" is the tiny model in the binary. Method settings a shallower model lacks (pFedMMA's start block) are adjusted, and each change is logged")
	f.BoolVar(&listPresets, "list-presets", false, "list the presets and exit")
	rootCmd.AddCommand(cmd)
}

// useModel points e at --model ("embedded": the one in the binary) and
// returns its resolved path.
func useModel(e *config.Experiment, model string) (string, error) {
	if model == "embedded" {
		model = ""
	}
	path, err := resolveModelPath(model)
	if err != nil {
		return "", err
	}
	return path, rundir.UseModel(e, model, path)
}
