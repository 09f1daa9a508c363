package main

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/experiment"
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

// compose builds the experiment the flags describe (the default preset
// when neither --config nor --preset is given) with its model resolved
// (empty: the embedded one).
func (x *experimentFlags) compose() (*config.Experiment, string, error) {
	preset := x.preset
	if x.cfgPath == "" && preset == "" {
		preset = config.DefaultPreset
	}
	e, err := config.Compose(config.Sources{Preset: preset, File: x.cfgPath, Sets: x.sets})
	if err != nil {
		return nil, "", err
	}
	model, err := resolveModelPath(e.Model)
	return e, model, err
}

// robustFlags are serve's robust aggregation and differential privacy
// flags: shorthands for --set aggregation.… (the section `run` reads too).
type robustFlags struct {
	aggregate                                string
	trim, clipNorm, dpNoise, dpClip, dpDelta float64
	secure                                   bool
}

func (r *robustFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&r.aggregate, "aggregate", "mean", "mean (the method's own), median or trimmed-mean of the shared tensors (--set aggregation.rule=…)")
	fl.Float64Var(&r.trim, "trim", 0, "trimmed-mean: fraction cut at each end (--set aggregation.trim=…)")
	fl.Float64Var(&r.clipNorm, "clip-norm", 0, "clip each site's update to this L2 norm, 0: off (--set aggregation.clip_norm=…)")
	fl.Float64Var(&r.dpNoise, "dp-noise-multiplier", 0, "differential privacy: Gaussian noise σ, 0: off (--set aggregation.dp.noise_multiplier=…)")
	fl.Float64Var(&r.dpClip, "dp-clip", 1, "differential privacy: per-site L2 clip C (--set aggregation.dp.clip=…)")
	fl.Float64Var(&r.dpDelta, "dp-delta", 1e-5, "differential privacy: δ of the reported ε (--set aggregation.dp.delta=…)")
	fl.BoolVar(&r.secure, "secure-aggregation", false, "secure aggregation (SecAgg+): the coordinator holds only masked updates and their sum (--set federation.secure_aggregation=true; sites receive it with the task)")
}

// sets turns the flags given in fl into the --set overrides of the
// aggregation section they are shorthands for; a flag left unset changes
// nothing (the configuration's value stands). Sites need the same settings
// (--set aggregation.…): they enter the configuration's fingerprint.
func (r *robustFlags) sets(fl *pflag.FlagSet) ([]string, error) {
	var sets []string
	if fl.Changed("aggregate") {
		rule := map[string]string{"mean": config.RuleMean, "median": config.RuleMedian,
			"trimmed-mean": config.RuleTrimmedMean, config.RuleTrimmedMean: config.RuleTrimmedMean}[r.aggregate]
		if rule == "" {
			return nil, fmt.Errorf("--aggregate %q: want mean, median or trimmed-mean", r.aggregate)
		}
		sets = append(sets, "aggregation.rule="+rule)
	}
	for _, f := range []struct {
		flag, key string
		v         float64
	}{{"trim", "trim", r.trim}, {"clip-norm", "clip_norm", r.clipNorm}, {"dp-noise-multiplier", "dp.noise_multiplier", r.dpNoise},
		{"dp-clip", "dp.clip", r.dpClip}, {"dp-delta", "dp.delta", r.dpDelta}} {
		if fl.Changed(f.flag) {
			sets = append(sets, "aggregation."+f.key+"="+strconv.FormatFloat(f.v, 'g', -1, 64))
		}
	}
	if fl.Changed("secure-aggregation") {
		sets = append(sets, "federation.secure_aggregation="+strconv.FormatBool(r.secure))
	}
	return sets, nil
}

func init() {
	var x experimentFlags
	var r robustFlags
	var quiet bool
	var cf compressFlag
	c := experiment.ServeConfig{}
	cmd := &cobra.Command{
		Use:   "serve [--config EXP.yaml] [--preset NAME] [--set k=v]... --listen ADDR --certs D --state DIR [--out DIR] [--http ADDR]",
		Short: "Coordinate a federation over the network (gRPC, mTLS): the strategy, never data or private tensors",
		Long: `Run the coordinator of a federation configured exactly as 'pfedmma run' is (one trained
method). Sites ('pfedmma site') connect with the certificates made by 'pfedmma certs init';
the i-th site of --sites there is client i. Each site receives the experiment (the resolved
configuration and the model's SHA-256) when it registers: sites need no experiment flags.
The coordinator's state (rounds, strategy, sampler, received updates) lives in an SQLite
database in --state: restarted with the same flags after a crash it resumes where it stopped. After the last round it writes the run's
outputs (config.yaml, run.json, summary.json, report.md, figures, metrics,
global/METHOD.safetensors) to --out and exits 0.
--http serves the live dashboard, /metrics (Prometheus) and /healthz.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sets, err := r.sets(cmd.Flags())
			if err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			csets, err := cf.sets(cmd.Flags())
			if err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			sets = append(sets, csets...)
			xs := x // the flags after the user's --set: they win
			xs.sets = append(append([]string(nil), x.sets...), sets...)
			if c.Experiment, c.Model, err = xs.compose(); err != nil {
				return err
			}
			if c.Preset = x.preset; c.Preset == "" && x.cfgPath == "" {
				c.Preset = config.DefaultPreset // the dashboard names it
			}
			if quiet {
				// warnings and errors only, then the results table
				c.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			}
			res, err := experiment.Serve(cmd.Context(), c)
			if err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), res.Table.Text())
			fmt.Fprintf(cmd.OutOrStdout(), "results in %s\n", res.OutDir)
			return nil
		},
	}
	x.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&c.Listen, "listen", "", "gRPC address, e.g. :7443")
	fl.StringVar(&c.Certs, "certs", "", "certificates folder (pfedmma certs init)")
	fl.StringVar(&c.State, "state", "", "coordinator state folder (SQLite, WAL)")
	fl.StringVar(&c.Out, "out", "", "output folder (default STATE/out)")
	fl.StringVar(&c.HTTP, "http", "", "dashboard, /api/status, /metrics and /healthz address: a bare port (7444 or :7444) listens on 127.0.0.1 only; name the host to listen elsewhere (0.0.0.0:7444)")
	fl.StringVar(&c.HTTPTokenFile, "http-token-file", "", "file holding a bearer token that opens the dashboard, /api/status and /metrics (besides operator certificates from 'pfedmma certs add-operator')")
	fl.DurationVar(&c.Linger, "linger", 0, "keep the dashboard up this long after the last round (e.g. 10m)")
	fl.BoolVar(&c.Insecure, "insecure-dev", false, "NO TLS: clear-text gRPC and HTTP, for local development only (with --sites instead of --certs)")
	fl.StringSliceVar(&c.Sites, "sites", nil, "with --insecure-dev: the site names, client i being the i-th (with certificates they come from --certs)")
	fl.IntVar(&c.MinFit, "min-fit", 1, "fewest sites that must answer for a round to close; with fewer the round waits for the missing sites and runs again (logged each minute); more than the federation is refused")
	fl.DurationVar(&c.RoundTimeout, "round-timeout", 10*time.Minute, "deadline of each round's training (and of its evaluation)")
	fl.DurationVar(&c.RegisterTimeout, "register-timeout", 0, "start after this long with the sites registered (at least --min-fit; the missing ones are logged); 0: wait for every site")
	fl.DurationVar(&c.OfflineAfter, "offline-after", 15*time.Second, "a site not heard from for this long is offline: not asked, its task given up (a round below --min-fit then waits for it)")
	fl.BoolVar(&quiet, "quiet", false, "no progress: log only warnings and errors, then print the results table")
	r.add(fl)
	cf.add(fl)
	rootCmd.AddCommand(cmd)
}
