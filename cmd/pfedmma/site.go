package main

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/experiment"
)

func init() {
	var x experimentFlags
	var c experiment.SiteConfig
	var clients string
	var modelFlag, policyFile string
	cmd := &cobra.Command{
		Use:   "site --server ADDR --certs D (--name SITE | --clients 0-49) --data DIR|world [--state DIR] [--model FILE] [--policy FILE] [--accept-methods M,…] [--max-upload-mib N] [--require-secure-aggregation]",
		Short: "Serve one site of a federation: train on local data, upload only the tensors it computes from the accepted task",
		Long: `Join the federation coordinated by 'pfedmma serve' as site SITE (its certificate's CN; the
i-th site of 'certs init --sites' is client i). The site receives the experiment from the
coordinator when it registers (methods and their settings, protocol, rounds, seeds, and the
model's SHA-256) and builds its client from it; its data, model, vocabulary, state, threads
and cache stay its own: a task setting one of them is refused, naming the key. With --data
world the site generates the world and trains on its share (client i of the protocol); with
--data DIR it reads the experiment's dataset from DIR.

A site never downloads weights: the model must be the embedded one or --model FILE, with the
coordinator's SHA-256. At acceptance the site computes from the task's method and settings
the tensors it uploads each round (names, shapes, bytes), logs them and writes them to
STATE/uploads.json; it refuses to send anything else. Without secure aggregation the
coordinator sees each of these uploads; with federation.secure_aggregation it receives them
masked and learns their sum. --policy FILE (YAML: methods, settings, max_upload_mib,
max_download_mib, require_secure_aggregation, min_participants) or its shorthand flags
--accept-methods, --max-upload-mib (checked against the site's own computation and every real
upload, a masked value counting 8 bytes), --require-secure-aggregation (also implied by a task
with federation.secure_aggregation: true: no upload in the clear), --min-participants and
--max-download-mib refuse tasks the site does not accept; a refused task is logged on both
sides and the site exits non-zero with the reason.
--config/--preset/--set stay allowed for scripted setups: the coordinator then refuses a site
whose experiment differs, naming the settings (--set of site-local keys alone, threads=… or
cache.…, only tune the site).

Private parameters, optimizer and random state stay in --state (default ./site-SITE), with the
task received (task.yaml), the site's metrics (metrics.jsonl) and, at the end, its
personalised parameters (sites/METHOD/client_NNN.safetensors, the file 'pfedmma run' writes
for client NNN). It retries while the coordinator is away (its log says for how long so far) and exits 0
when the federation ends, recording the end in STATE/state/federation-over.json: started again
on that folder for the same coordinator (address and CA), a site whose federation finished
exits 0 at once saying so (give another --state to join a new federation); after a stop
(SIGTERM on serve) it waits for the coordinator to be restarted.
With --clients instead of --name, one process hosts several clients (a simulation spread over
a few machines): each speaks with its own certificate and keeps its own folder,
STATE/site-NAME (--state default: the working folder); they share the loaded model and take
turns to train.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if c.Insecure && c.Certs != "" {
				return errors.New("site: --insecure-dev and --certs exclude each other (--insecure-dev connects in clear text and would ignore the certificates)")
			}
			if err := sitePolicy(cmd.Flags(), &c.Policy, policyFile); err != nil {
				return err
			}
			if c.DuplicateGrace <= 0 {
				return fmt.Errorf("site: --duplicate-grace %s: want a positive duration", c.DuplicateGrace)
			}
			var err error
			fl := cmd.Flags()
			c.Local = nil
			ownExperiment := fl.Changed("config") || fl.Changed("preset")
			setModel := ""
			c.Vocab = ""
			for _, kv := range x.sets {
				path, value, err := config.ParseSet(kv)
				if err != nil {
					return fmt.Errorf("site: --set %s: %w", kv, err)
				}
				switch path {
				case "model":
					setModel = value
				case "vocab":
					c.Vocab = value
				}
				if config.IsSiteLocal(path) {
					c.Local = append(c.Local, kv)
				} else {
					ownExperiment = true
				}
			}
			if ownExperiment {
				if c.Experiment, _, err = x.compose(); err != nil {
					return err
				}
			}
			c.ModelArg = cmp.Or(modelFlag, setModel)
			if c.Experiment != nil {
				c.ModelArg, c.Vocab = cmp.Or(c.ModelArg, c.Experiment.Model), c.Experiment.Vocab
			}
			if c.ModelArg == "embedded" {
				c.ModelArg = ""
			}
			if c.Model, err = resolveModelPath(c.ModelArg); err != nil {
				return fmt.Errorf("site: --model: %w", err)
			}
			if clients != "" {
				return hostSites(cmd, c, clients)
			}
			res, err := experiment.Site(cmd.Context(), c)
			if err != nil {
				return fmt.Errorf("%s: %w", strings.TrimSpace("site "+c.Name), err)
			}
			printSiteDone(cmd.OutOrStdout(), c.Name, res.ID, res.State, res.Over, res.OverFile)
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
func addPolicyFlags(fl *pflag.FlagSet, p *experiment.SitePolicy, file *string) {
	fl.StringVar(file, "policy", "", "the site's policy, a YAML file: methods, settings (pinned values, e.g. fedotp.avg_prompt: 1), max_upload_mib, max_download_mib, require_secure_aggregation, min_participants; --accept-methods, --max-upload-mib, --max-download-mib, --require-secure-aggregation and --min-participants are shorthands for its keys (a key given both ways is an error)")
	fl.StringSliceVar(&p.AcceptMethods, "accept-methods", nil, "refuse a task whose trained method is not one of these (e.g. pfedmma,promptfl); default: any (policy key methods)")
	fl.Float64Var(&p.MaxUploadMiB, "max-upload-mib", 0, "refuse a task whose upload per round, as this site computes it from the task's method and settings (a masked value counting 8 bytes), exceeds this many MiB, and any real upload over it; 0: no limit (policy key max_upload_mib)")
	fl.Float64Var(&p.MaxDownloadMiB, "max-download-mib", 0, "refuse a task whose parameters exceed this many MiB before reading them; 0: 256 (policy key max_download_mib)")
	fl.BoolVar(&p.RequireSecureAggregation, "require-secure-aggregation", false, "refuse a task without federation.secure_aggregation, and never upload in the clear: a fit task without a secure-aggregation session ends the site (policy key require_secure_aggregation)")
	fl.IntVar(&p.MinParticipants, "min-participants", 0, "refuse a task with fewer clients, and a secure-aggregation round with fewer sites, than this (policy key min_participants)")
}

// policyFlags are the site policy's keys and the flags that are their
// shorthands.
var policyFlags = map[string]string{"accept-methods": "methods", "max-upload-mib": "max_upload_mib", "max-download-mib": "max_download_mib",
	"require-secure-aggregation": "require_secure_aggregation", "min-participants": "min_participants"}

// sitePolicy completes the flags' policy p with the policy file (a key
// given both ways is an error) and checks it.
func sitePolicy(fl *pflag.FlagSet, p *experiment.SitePolicy, file string) error {
	if file != "" {
		var fromFile experiment.SitePolicy
		keys, err := experiment.LoadSitePolicy(file, &fromFile)
		if err != nil {
			return fmt.Errorf("site: %w", err)
		}
		for _, flag := range slices.Sorted(maps.Keys(policyFlags)) {
			if key := policyFlags[flag]; fl.Changed(flag) && slices.Contains(keys, key) {
				return fmt.Errorf("site: --%s and the key %s of --policy %s both given: keep one", flag, key, file)
			}
		}
		for _, key := range keys {
			switch key {
			case "methods":
				p.AcceptMethods = fromFile.AcceptMethods
			case "max_upload_mib":
				p.MaxUploadMiB = fromFile.MaxUploadMiB
			case "max_download_mib":
				p.MaxDownloadMiB = fromFile.MaxDownloadMiB
			case "require_secure_aggregation":
				p.RequireSecureAggregation = fromFile.RequireSecureAggregation
			case "min_participants":
				p.MinParticipants = fromFile.MinParticipants
			}
		}
		p.Settings, p.File, p.FileKeys = fromFile.Settings, fromFile.File, fromFile.FileKeys
	}
	for flag, v := range map[string]float64{"max-upload-mib": p.MaxUploadMiB, "max-download-mib": p.MaxDownloadMiB} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("site: --%s %g: want a size in MiB ≥ 0", flag, v)
		}
	}
	if p.MinParticipants < 0 {
		return fmt.Errorf("site: --min-participants %d: want a number of sites ≥ 0", p.MinParticipants)
	}
	for _, m := range p.AcceptMethods {
		if !slices.Contains(config.Methods(), m) {
			return fmt.Errorf("site: --accept-methods: %q is no method (pfedmma methods lists them)", m)
		}
	}
	return nil
}
