package experiment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/transport"
)

// SiteConfig is one site of a federation over the network (`pfedmma
// site`), configured as the coordinator is.
type SiteConfig struct {
	Experiment *config.Experiment
	// Model is the checkpoint (the configuration's model, resolved).
	Model string
	// Server is the coordinator's address; Name the site's certificate CN
	// (the i-th site of `certs init --sites` is client i).
	Server, Name string
	Certs        string
	Insecure     bool
	// Sites, with Insecure, names the federation's sites in client order
	// (with certificates they come from Certs' sites.txt).
	Sites []string
	// Data is the dataset folder, or "world" (generated).
	Data string
	// State holds the site's private state, metrics and final parameters
	// (default site-NAME).
	State  string
	Logger *slog.Logger
}

// SiteResult is what Site did: the site's client number and its state
// folder.
type SiteResult struct {
	ID    int
	State string
}

// Site runs one site until the federation ends. Its private state stays in State/state; its evaluations go to
// State/metrics.jsonl and, at the end, what it keeps to
// State/sites/<method>/client_NNN.safetensors, the file `pfedmma run`
// writes for that client.
func Site(ctx context.Context, c SiteConfig) (*SiteResult, error) {
	if c.Server == "" || c.Name == "" || c.Data == "" || (c.Certs == "" && !c.Insecure) {
		return nil, errors.New("--server, --certs, --name and --data are required")
	}
	if c.State == "" {
		c.State = "site-" + c.Name
	}
	e := c.Experiment
	if err := siteData(e, c.Data); err != nil {
		return nil, err
	}
	id, err := siteID(c)
	if err != nil {
		return nil, err
	}
	o, err := FromConfig(e, c.Model, e.Seed, c.State)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.State, 0o755); err != nil {
		return nil, err
	}
	f, err := PrepareFederated(ctx, o, id)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	logger := c.Logger
	if logger == nil {
		logger = slog.Default()
	}
	state := filepath.Join(c.State, "state")
	sc := &siteClient{Client: f.Client(id), fingerprint: e.Fingerprint(), metrics: filepath.Join(c.State, "metrics.jsonl")}
	err = transport.RunSite(ctx, transport.SiteConfig{Addr: c.Server, CertsDir: c.Certs, Name: c.Name,
		Insecure: c.Insecure, StateDir: state, Logger: logger, Settings: e.Settings()}, sc)
	if err != nil {
		return nil, err
	}
	// a site restarted after its last task holds its initial state in
	// memory: keep what it saved
	if err := federation.NewSite(f.Client(id), state).Restore(); err != nil {
		return nil, err
	}
	if err := f.WriteSite(c.State, id, map[string]string{"site": c.Name}); err != nil {
		return nil, err
	}
	return &SiteResult{ID: id, State: c.State}, nil
}

// siteData points e's dataset at the site's --data (a folder, or world).
func siteData(e *config.Experiment, data string) error {
	if data == "world" {
		if e.Dataset.Name != "world" {
			return fmt.Errorf("--data world but the configuration's dataset is %q", e.Dataset.Name)
		}
		return nil
	}
	if fi, err := os.Stat(data); err != nil {
		return fmt.Errorf("--data %s: %w", data, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("--data %s: not a folder (give the dataset's folder, or world)", data)
	}
	if e.Dataset.Name == "world" {
		return fmt.Errorf("--data %s but the configuration's dataset is world, which is generated and reads no folder: pass --data world, or choose the dataset with --set dataset.name=NAME", data)
	}
	e.Dataset.Root = data
	return nil
}

// siteClient checks that the coordinator runs this site's configuration
// (the fingerprint handshake) and records the site's evaluations.
type siteClient struct {
	federation.Client
	fingerprint, metrics string
}

func (s *siteClient) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	if fp, ok := ins.Config[FingerprintKey]; ok && fp != s.fingerprint {
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

// siteID is the site's client number: its place in the certificates
// folder's sites.txt, or with --insecure-dev in --sites.
func siteID(c SiteConfig) (int, error) {
	switch {
	case c.Insecure && c.Certs != "":
		return 0, errors.New("--insecure-dev and --certs exclude each other (--insecure-dev connects in clear text and would ignore the certificates; name the sites with --sites)")
	case c.Insecure && len(c.Sites) == 0:
		return 0, errors.New("--insecure-dev needs --sites NAME,… as the coordinator's (client i is the i-th name)")
	case !c.Insecure && len(c.Sites) > 0:
		return 0, errors.New("--sites is for --insecure-dev only (with certificates the sites are the certificates folder's sites.txt)")
	case c.Insecure:
		i := slices.Index(c.Sites, c.Name)
		if i < 0 {
			return 0, fmt.Errorf("--name %q is not among --sites %v", c.Name, c.Sites)
		}
		return i, nil
	}
	return certs.SiteID(c.Certs, c.Name)
}
