package main

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/deploy"
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

// robustFlags are serve's robust aggregation, differential privacy and
// compression flags: shorthands for --set aggregation.… (the section `run`
// reads too) and federation.compress.
type robustFlags struct{ config.Shorthands }

func (r *robustFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&r.Aggregate, "aggregate", "mean", "mean (the method's own), median or trimmed-mean of the shared tensors (--set aggregation.rule=…)")
	fl.Float64Var(&r.Trim, "trim", 0, "trimmed-mean: fraction cut at each end (--set aggregation.trim=…)")
	fl.Float64Var(&r.ClipNorm, "clip-norm", 0, "clip each site's update to this L2 norm, 0: off (--set aggregation.clip_norm=…)")
	fl.Float64Var(&r.DPNoise, "dp-noise-multiplier", 0, "differential privacy: Gaussian noise σ, 0: off (--set aggregation.dp.noise_multiplier=…)")
	fl.Float64Var(&r.DPClip, "dp-clip", 1, "differential privacy: per-site L2 clip C (--set aggregation.dp.clip=…)")
	fl.Float64Var(&r.DPDelta, "dp-delta", 1e-5, "differential privacy: δ of the reported ε (--set aggregation.dp.delta=…)")
	fl.BoolVar(&r.Secure, "secure-aggregation", false, "secure aggregation (SecAgg+): the coordinator holds only masked updates and their sum (--set federation.secure_aggregation=true; sites receive it with the task)")
	fl.StringVar(&r.Compress, "compress", "none", "encode the tensors sent both ways: none, fp16 (half precision) or int8 (blockwise, a float32 scale per 64 values) (--set federation.compress=…; sites need the same setting)")
}

// sets turns the flags given in fl into the --set overrides they are
// shorthands for; a flag left unset changes nothing. Sites need the same
// settings (--set aggregation.…): they enter the configuration's
// fingerprint.
func (r *robustFlags) sets(fl *pflag.FlagSet) ([]string, error) { return r.Shorthands.Sets(fl.Changed) }

func init() {
	var x experimentFlags
	var r robustFlags
	var quiet bool
	c := deploy.ServeConfig{}
	cmd := &cobra.Command{
		Use:   "serve [--config EXP.yaml] [--preset NAME] [--set k=v]... --listen ADDR --certs D --state DIR [--out DIR] [--http ADDR]",
		Short: "Coordinate a federation over the network (gRPC, mTLS): the strategy, never data or private tensors",
		Long:  deploy.ServeHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd, c, x, &r, quiet)
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
	rootCmd.AddCommand(cmd)
}

// runServe runs `pfedmma serve` with c completed from the experiment flags
// x and their shorthands r.
func runServe(cmd *cobra.Command, c deploy.ServeConfig, x experimentFlags, r *robustFlags, quiet bool) error {
	sets, err := r.sets(cmd.Flags())
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
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
	res, err := deploy.Serve(cmd.Context(), c)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	fmt.Fprintln(cmd.OutOrStdout(), res.Table.Text())
	fmt.Fprintf(cmd.OutOrStdout(), "results in %s\n", res.OutDir)
	return nil
}
