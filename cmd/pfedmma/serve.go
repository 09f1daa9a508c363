package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/transport"
)

// experimentFlags are the configuration flags `run`, `serve` and `site`
// share: a preset, a YAML file and --set overrides.
type experimentFlags struct {
	cfgPath, preset string
	sets            []string
}

func (x *experimentFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&x.cfgPath, "config", "", "experiment YAML (see config/example.yaml)")
	f.StringVar(&x.preset, "preset", "", "start from a preset: "+strings.Join(config.PresetNames(), ", "))
	f.StringArrayVar(&x.sets, "set", nil, "override a field, e.g. --set federation.rounds=3 (repeatable)")
}

func (x *experimentFlags) compose() (*config.Experiment, error) {
	preset := x.preset
	if x.cfgPath == "" && preset == "" {
		preset = config.DefaultPreset
	}
	return config.Compose(config.Sources{Preset: preset, File: x.cfgPath, Sets: x.sets})
}

// fingerprintKey carries the coordinator's configuration fingerprint in
// every round's settings; a site with another configuration refuses.
const fingerprintKey = "experiment_fingerprint"

func init() {
	var x experimentFlags
	var listen, certsDir, state, out, httpAddr, aggregate string
	var insecure bool
	var minFit int
	var timeout time.Duration
	var trim, clipNorm, dpNoise, dpClip, dpDelta float64
	cmd := &cobra.Command{
		Use:   "serve [--config EXP.yaml] [--preset NAME] [--set k=v]... --listen ADDR --certs D --state DIR [--out DIR] [--http ADDR]",
		Short: "Coordinate a federation over the network (gRPC, mTLS): the strategy, never data or private tensors",
		Long: `Run the coordinator of a federation configured exactly as 'pfedmma run' is (one trained
method). Sites ('pfedmma site') connect with the certificates made by 'pfedmma certs init';
the i-th site of --sites there is client i. The coordinator's state (rounds, strategy,
sampler, received updates) lives in an SQLite database in --state: restarted with the same
flags after a crash it resumes where it stopped. After the last round it writes the run's
outputs (summary.json, report.md, figures, metrics, global.safetensors) to --out and exits 0.
--http serves the live dashboard, /metrics (Prometheus) and /healthz.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sets, err := aggregationSets(cmd, aggregate, trim, clipNorm, dpNoise, dpClip, dpDelta)
			if err != nil {
				return err
			}
			xs := x // the flags after the user's --set: they win
			xs.sets = append(append([]string(nil), x.sets...), sets...)
			e, err := xs.compose()
			if err != nil {
				return err
			}
			if state == "" || (certsDir == "" && !insecure) || listen == "" {
				return fmt.Errorf("serve: --listen, --certs and --state are required")
			}
			if out == "" {
				out = filepath.Join(state, "out")
			}
			model, err := resolveModelPath(e.Model)
			if err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			o, err := experiment.FromConfig(e, model, e.Seed, out)
			if err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			f, err := experiment.PrepareFederated(cmd.Context(), o, -1)
			if err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			defer f.Close()
			spec, err := f.Spec()
			if err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			coord := serveCoordinator(o, f.Plan.Strategy, len(f.Task.Clients), minFit, timeout, e.Fingerprint())
			if err := os.MkdirAll(state, 0o755); err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			hist, err := transport.RunCoordinator(cmd.Context(), transport.CoordinatorConfig{
				Addr: listen, HTTPAddr: httpAddr, CertsDir: certsDir, Insecure: insecure,
				StatePath: filepath.Join(state, "coordinator.db"), Spec: transport.Spec(spec), Logger: slog.Default(),
			}, coord)
			if err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			res, err := experiment.WriteFederationReports(o, f, hist)
			if err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), res.Table.Text())
			fmt.Fprintf(cmd.OutOrStdout(), "results in %s\n", out)
			return nil
		},
	}
	x.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&listen, "listen", "", "gRPC address, e.g. :7443")
	fl.StringVar(&certsDir, "certs", "", "certificates folder (pfedmma certs init)")
	fl.StringVar(&state, "state", "", "coordinator state folder (SQLite, WAL)")
	fl.StringVar(&out, "out", "", "output folder (default STATE/out)")
	fl.StringVar(&httpAddr, "http", "", "dashboard, /metrics and /healthz address, e.g. :7444")
	fl.BoolVar(&insecure, "insecure-dev", false, "NO TLS: clear-text gRPC and HTTP, for local development only")
	fl.IntVar(&minFit, "min-fit", 1, "fewest sites that must answer for a round to close")
	fl.DurationVar(&timeout, "round-timeout", 10*time.Minute, "deadline of each round's training (and of its evaluation)")
	fl.StringVar(&aggregate, "aggregate", "mean", "mean (the method's own), median or trimmed-mean of the shared tensors (--set aggregation.rule=…)")
	fl.Float64Var(&trim, "trim", 0, "trimmed-mean: fraction cut at each end (--set aggregation.trim=…)")
	fl.Float64Var(&clipNorm, "clip-norm", 0, "clip each site's update to this L2 norm, 0: off (--set aggregation.clip_norm=…)")
	fl.Float64Var(&dpNoise, "dp-noise-multiplier", 0, "differential privacy: Gaussian noise σ, 0: off (--set aggregation.dp.noise_multiplier=…)")
	fl.Float64Var(&dpClip, "dp-clip", 1, "differential privacy: per-site L2 clip C (--set aggregation.dp.clip=…)")
	fl.Float64Var(&dpDelta, "dp-delta", 1e-5, "differential privacy: δ of the reported ε (--set aggregation.dp.delta=…)")
	rootCmd.AddCommand(cmd)
}

// aggregationSets turns serve's hardening flags into the --set overrides of
// the configuration's aggregation section they are shorthands for; a flag
// left unset changes nothing (the configuration's value stands). Sites
// need the same settings (--set aggregation.…): they enter the
// configuration's fingerprint.
func aggregationSets(cmd *cobra.Command, aggregate string, trim, clipNorm, dpNoise, dpClip, dpDelta float64) ([]string, error) {
	fl := cmd.Flags()
	var sets []string
	if fl.Changed("aggregate") {
		rule := map[string]string{"mean": config.RuleMean, "median": config.RuleMedian,
			"trimmed-mean": config.RuleTrimmedMean, config.RuleTrimmedMean: config.RuleTrimmedMean}[aggregate]
		if rule == "" {
			return nil, fmt.Errorf("serve: --aggregate %q: want mean, median or trimmed-mean", aggregate)
		}
		sets = append(sets, "aggregation.rule="+rule)
	}
	for _, f := range []struct {
		flag, key string
		v         float64
	}{{"trim", "trim", trim}, {"clip-norm", "clip_norm", clipNorm}, {"dp-noise-multiplier", "dp.noise_multiplier", dpNoise},
		{"dp-clip", "dp.clip", dpClip}, {"dp-delta", "dp.delta", dpDelta}} {
		if fl.Changed(f.flag) {
			sets = append(sets, "aggregation."+f.key+"="+strconv.FormatFloat(f.v, 'g', -1, 64))
		}
	}
	return sets, nil
}

// serveCoordinator is the coordinator of `serve`: the rounds, sampling and
// evaluation schedule of `pfedmma run` (o, as experiment.FromConfig
// resolves them: federation.eval_every 0 evaluates after the last round
// only), every site asked at once, failures tolerated.
func serveCoordinator(o experiment.Options, strat federation.Strategy, clients, minFit int, timeout time.Duration, fingerprint string) *federation.Coordinator {
	return &federation.Coordinator{Strategy: strat, Rounds: o.Rounds, Fraction: o.Fraction,
		Seed: o.Seed, EvalEvery: o.EvalEvery, Parallel: clients, TolerateFailures: true,
		MinFit: minFit, RoundTimeout: timeout, FitConfig: func(int) map[string]string { return map[string]string{fingerprintKey: fingerprint} }}
}
