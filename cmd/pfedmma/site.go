package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/transport"
)

func init() {
	var x experimentFlags
	var server, certsDir, name, data, state string
	var insecure bool
	cmd := &cobra.Command{
		Use:   "site --server ADDR --certs D --name SITE --data DIR|world [--state DIR] [--config EXP.yaml] [--preset NAME] [--set k=v]...",
		Short: "Serve one site of a federation: train on local data, upload only the shared tensors",
		Long: `Join the federation coordinated by 'pfedmma serve' as site SITE (its certificate's CN; the
i-th site of 'certs init --sites' is client i). Give the same --config/--preset/--set as the
coordinator (it refuses a site whose configuration differs). With --data world the site
generates the configured world and trains on its share (client i of the protocol); with
--data DIR it reads the configured dataset from DIR. Private parameters, optimizer and
random state stay in --state (default ./site-SITE), with the site's metrics
(metrics.jsonl) and, at the end, its personalised parameters (site.safetensors). It retries
while the coordinator is away and exits 0 when the federation ends.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := x.compose()
			if err != nil {
				return err
			}
			if server == "" || name == "" || data == "" || (certsDir == "" && !insecure) {
				return fmt.Errorf("site: --server, --certs, --name and --data are required")
			}
			if state == "" {
				state = "site-" + name
			}
			if data != "world" {
				if fi, err := os.Stat(data); err != nil {
					return fmt.Errorf("site: --data %s: %w", data, err)
				} else if !fi.IsDir() {
					return fmt.Errorf("site: --data %s: not a folder (give the dataset's folder, or world)", data)
				}
				if e.Dataset.Name == "world" {
					return fmt.Errorf("site: --data %s but the configuration's dataset is world, which is generated and reads no folder: pass --data world, or choose the dataset with --set dataset.name=NAME", data)
				}
			}
			id, err := certs.SiteID(certsDir, name)
			if err != nil {
				return fmt.Errorf("site: %w", err)
			}
			if data != "world" {
				e.Dataset.Root = data
			} else if e.Dataset.Name != "world" {
				return fmt.Errorf("site: --data world but the configuration's dataset is %q", e.Dataset.Name)
			}
			model, err := resolveModelPath(e.Model)
			if err != nil {
				return fmt.Errorf("site: %w", err)
			}
			o, err := experiment.FromConfig(e, model, e.Seed, state)
			if err != nil {
				return fmt.Errorf("site: %w", err)
			}
			if err := os.MkdirAll(state, 0o755); err != nil {
				return fmt.Errorf("site: %w", err)
			}
			f, err := experiment.PrepareFederated(cmd.Context(), o, id)
			if err != nil {
				return fmt.Errorf("site %s: %w", name, err)
			}
			defer f.Close()
			c := &siteClient{Client: f.Client(id), fingerprint: e.Fingerprint(), metrics: filepath.Join(state, "metrics.jsonl")}
			err = transport.RunSite(cmd.Context(), transport.SiteConfig{Addr: server, CertsDir: certsDir, Name: name,
				Insecure: insecure, StateDir: filepath.Join(state, "state"), Logger: slog.Default()}, c)
			if err != nil {
				return fmt.Errorf("site %s: %w", name, err)
			}
			// a site restarted after its last task holds its initial state
			// in memory: keep what it saved
			if err := federation.NewSite(f.Client(id), filepath.Join(state, "state")).Restore(); err != nil {
				return fmt.Errorf("site %s: %w", name, err)
			}
			params, err := f.SiteParams(id)
			if err != nil {
				return fmt.Errorf("site %s: %w", name, err)
			}
			if err := safetensors.Write(filepath.Join(state, "site.safetensors"), params, nil, map[string]string{"method": f.Name, "site": name}); err != nil {
				return fmt.Errorf("site %s: %w", name, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "site %s (client %d) done; its parameters and metrics are in %s\n", name, id, state)
			return nil
		},
	}
	x.add(cmd)
	fl := cmd.Flags()
	fl.StringVar(&server, "server", "", "coordinator address host:port")
	fl.StringVar(&certsDir, "certs", "", "certificates folder (ca.crt and sites/<name>.crt/.key)")
	fl.StringVar(&name, "name", "", "this site's name (its certificate's CN)")
	fl.StringVar(&data, "data", "", "this site's data: a dataset folder, or world")
	fl.StringVar(&state, "state", "", "this site's state folder (default site-NAME)")
	fl.BoolVar(&insecure, "insecure-dev", false, "NO TLS: clear-text gRPC, for local development only")
	rootCmd.AddCommand(cmd)
}

// siteClient checks that the coordinator runs this site's configuration
// and records the site's evaluations.
type siteClient struct {
	federation.Client
	fingerprint, metrics string
}

func (s *siteClient) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	if fp, ok := ins.Config[fingerprintKey]; ok && fp != s.fingerprint {
		return federation.FitRes{}, fmt.Errorf("the coordinator's configuration (fingerprint %s) differs from this site's (%s): start the site with the coordinator's --config/--preset/--set", fp, s.fingerprint)
	}
	return s.Client.Fit(ctx, ins)
}

func (s *siteClient) Evaluate(ctx context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	res, err := s.Client.Evaluate(ctx, ins)
	if err != nil {
		return res, err
	}
	line, err := json.Marshal(map[string]any{"round": ins.Round, "metrics": federation.Metrics(res.Metrics)})
	if err != nil {
		return res, err
	}
	fh, err := os.OpenFile(s.metrics, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return res, err
	}
	defer fh.Close()
	_, err = fh.Write(append(line, '\n'))
	return res, err
}
