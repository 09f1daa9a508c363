package main

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pfedmma/pfedmma/deploy"
)

func init() {
	var x experimentFlags
	var c deploy.SiteConfig
	var clients string
	var modelFlag, policyFile string
	cmd := &cobra.Command{
		Use:   "site --server ADDR --certs D (--name SITE | --clients 0-49) --data DIR|world [--state DIR] [--model FILE] [--policy FILE] [--accept-methods M,…] [--max-upload-mib N] [--require-secure-aggregation]",
		Short: "Serve one site of a federation: train on local data, upload only the tensors it computes from the accepted task",
		Long:  deploy.SiteHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := completeSite(cmd.Flags(), &c, x, modelFlag, policyFile); err != nil {
				return err
			}
			if clients != "" {
				return hostSites(cmd, c, clients)
			}
			res, err := deploy.Site(cmd.Context(), c)
			if err != nil {
				return fmt.Errorf("%s: %w", strings.TrimSpace("site "+c.Name), err)
			}
			deploy.WriteSiteDone(cmd.OutOrStdout(), c.Name, res.ID, res.State, res.Over, res.OverFile)
			return nil
		},
	}
	x.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&c.Server, "server", "", "coordinator address host:port")
	fl.StringVar(&c.Certs, "certs", "", "certificates folder (ca.crt and sites/<name>.crt/.key)")
	fl.StringVar(&c.Name, "name", "", "this site's name (its certificate's CN)")
	fl.StringVar(&c.Data, "data", "", "this site's data: a dataset folder, or world")
	fl.StringVar(&c.State, "state", "", "this site's state folder (default site-NAME); with --clients the folder holding each hosted client's site-NAME (default: the working folder)")
	fl.StringVar(&modelFlag, "model", "", "this site's copy of the coordinator's checkpoint (its SHA-256 must match; a site never downloads weights); default or \"embedded\": the tiny model in the binary")
	addPolicyFlags(fl, &c.Policy, &policyFile)
	fl.BoolVar(&c.Insecure, "insecure-dev", false, "NO TLS: clear-text gRPC, for local development only (with --sites instead of --certs)")
	fl.StringSliceVar(&c.Sites, "sites", nil, "with --insecure-dev: the federation's site names as given to serve, client i being the i-th")
	fl.StringVar(&clients, "clients", "", "host these clients in this one process instead of --name: numbers and ranges such as 0-49 or 0-9,20, each speaking with its own site certificate (sites.txt line i is client i); see 'Scale-out' in the README")
	fl.DurationVar(&c.DuplicateGrace, "duplicate-grace", time.Minute, "while the coordinator says another process already serves this site, keep retrying this long (the old session of a restarted site expiring) before exiting non-zero")
	rootCmd.AddCommand(cmd)
}

// addPolicyFlags declares the site policy's flags: --policy FILE and the
// shorthands of its keys.
func addPolicyFlags(fl *pflag.FlagSet, p *deploy.SitePolicy, file *string) {
	fl.StringVar(file, "policy", "", "the site's policy, a YAML file: methods, settings (pinned values, e.g. fedotp.avg_prompt: 1), max_upload_mib, max_download_mib, require_secure_aggregation, min_participants; --accept-methods, --max-upload-mib, --max-download-mib, --require-secure-aggregation and --min-participants are shorthands for its keys (a key given both ways is an error)")
	fl.StringSliceVar(&p.AcceptMethods, "accept-methods", nil, "refuse a task whose trained method is not one of these (e.g. pfedmma,promptfl); default: any (policy key methods)")
	fl.Float64Var(&p.MaxUploadMiB, "max-upload-mib", 0, "refuse a task whose upload per round, as this site computes it from the task's method and settings (a masked value counting 8 bytes), exceeds this many MiB, and any real upload over it; 0: no limit (policy key max_upload_mib)")
	fl.Float64Var(&p.MaxDownloadMiB, "max-download-mib", 0, "refuse a task whose parameters exceed this many MiB before reading them; 0: 256 (policy key max_download_mib)")
	fl.BoolVar(&p.RequireSecureAggregation, "require-secure-aggregation", false, "refuse a task without federation.secure_aggregation, and never upload in the clear: a fit task without a secure-aggregation session ends the site (policy key require_secure_aggregation)")
	fl.IntVar(&p.MinParticipants, "min-participants", 0, "refuse a task with fewer clients, and a secure-aggregation round with fewer sites, than this (policy key min_participants)")
}

// sitePolicy completes the flags' policy p with the policy file (a key
// given both ways is an error) and checks it.
func sitePolicy(fl *pflag.FlagSet, p *deploy.SitePolicy, file string) error {
	if err := deploy.CompleteSitePolicy(p, file, fl.Changed); err != nil {
		return fmt.Errorf("site: %w", err)
	}
	return nil
}

// completeSite checks the site's flags and completes c from them: the
// policy, the site-local --set overrides, the experiment when the site
// gives its own, and the model.
func completeSite(fl *pflag.FlagSet, c *deploy.SiteConfig, x experimentFlags, modelFlag, policyFile string) error {
	if c.Insecure && c.Certs != "" {
		return errors.New("site: --insecure-dev and --certs exclude each other (--insecure-dev connects in clear text and would ignore the certificates)")
	}
	if err := sitePolicy(fl, &c.Policy, policyFile); err != nil {
		return err
	}
	if c.DuplicateGrace <= 0 {
		return fmt.Errorf("site: --duplicate-grace %s: want a positive duration", c.DuplicateGrace)
	}
	sets, err := deploy.ParseSiteSets(x.sets)
	if err != nil {
		return fmt.Errorf("site: %w", err)
	}
	c.Local, c.Vocab = sets.Local, sets.Vocab
	if fl.Changed("config") || fl.Changed("preset") || sets.Own {
		if c.Experiment, _, err = x.compose(); err != nil {
			return err
		}
	}
	c.ModelArg = cmp.Or(modelFlag, sets.Model)
	if c.Experiment != nil {
		c.ModelArg, c.Vocab = cmp.Or(c.ModelArg, c.Experiment.Model), c.Experiment.Vocab
	}
	if c.ModelArg == "embedded" {
		c.ModelArg = ""
	}
	if c.Model, err = resolveModelPath(c.ModelArg); err != nil {
		return fmt.Errorf("site: --model: %w", err)
	}
	return nil
}

// hostSites runs `pfedmma site --clients SPEC`: one process serving
// several clients of the federation (--threads, the root's flag, sets the
// threads they take turns to use).
func hostSites(cmd *cobra.Command, c deploy.SiteConfig, spec string) error {
	res, err := deploy.HostSites(cmd.Context(), c, spec)
	if err != nil {
		return fmt.Errorf("site --clients %s: %w", spec, err)
	}
	for _, r := range res {
		deploy.WriteSiteDone(cmd.OutOrStdout(), r.Name, r.ID, r.State, r.Over, r.OverFile)
	}
	return nil
}
