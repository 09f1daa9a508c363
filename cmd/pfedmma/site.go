package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/experiment"
)

func init() {
	var x experimentFlags
	var c experiment.SiteConfig
	var clients string
	cmd := &cobra.Command{
		Use:   "site --server ADDR --certs D (--name SITE | --clients 0-49) --data DIR|world [--state DIR] [--config EXP.yaml] [--preset NAME] [--set k=v]...",
		Short: "Serve one site of a federation: train on local data, upload only the shared tensors",
		Long: `Join the federation coordinated by 'pfedmma serve' as site SITE (its certificate's CN; the
i-th site of 'certs init --sites' is client i). Give the same --config/--preset/--set as the
coordinator (it refuses a site whose configuration differs). With --data world the site
generates the configured world and trains on its share (client i of the protocol); with
--data DIR it reads the configured dataset from DIR. Private parameters, optimizer and
random state stay in --state (default ./site-SITE), with the site's metrics
(metrics.jsonl) and, at the end, its personalised parameters
(sites/METHOD/client_NNN.safetensors, the file 'pfedmma run' writes for client NNN). It
retries while the coordinator is away and exits 0 when the federation ends.
With --clients instead of --name, one process hosts several clients (a simulation spread over
a few machines): each speaks with its own certificate and keeps its own folder,
STATE/site-NAME (--state default: the working folder); they share the loaded model and take
turns to train.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if c.Insecure && c.Certs != "" {
				return errors.New("site: --insecure-dev and --certs exclude each other (--insecure-dev connects in clear text and would ignore the certificates)")
			}
			var err error
			if c.Experiment, c.Model, err = x.compose(); err != nil {
				return err
			}
			if clients != "" {
				return hostSites(cmd, c, clients)
			}
			res, err := experiment.Site(cmd.Context(), c)
			if err != nil {
				return fmt.Errorf("%s: %w", strings.TrimSpace("site "+c.Name), err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "site %s (client %d) done; its parameters and metrics are in %s\n", c.Name, res.ID, res.State)
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
	fl.BoolVar(&c.Insecure, "insecure-dev", false, "NO TLS: clear-text gRPC, for local development only (with --sites instead of --certs)")
	fl.StringSliceVar(&c.Sites, "sites", nil, "with --insecure-dev: the federation's site names as given to serve, client i being the i-th")
	fl.StringVar(&clients, "clients", "", "host these clients in this one process instead of --name: numbers and ranges such as 0-49 or 0-9,20, each speaking with its own site certificate (sites.txt line i is client i); see 'Scale-out' in the README")
	rootCmd.AddCommand(cmd)
}
