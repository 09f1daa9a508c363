// Package deploy runs a federation over the network: Serve is the
// coordinator (`pfedmma serve`), Site and HostSites the sites (`pfedmma
// site`). Both sides build the method's session from the same
// configuration as `pfedmma run` (experiment.PrepareFederated), so serve
// and its sites compute the simulation's results; the coordinator sends
// its task (the experiment, the model's SHA-256), and a site accepts it
// under its SitePolicy and uploads only the tensors it computes from it.
package deploy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/dashboard"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/transport"
)

// FingerprintKey carries the coordinator's configuration fingerprint in
// every round's settings; a site with another configuration refuses the
// round (the handshake of Serve and Site).
const FingerprintKey = "experiment_fingerprint"

// ServeConfig is one coordinator of a federation over the network
// (`pfedmma serve`): the experiment's one trained method, configured
// exactly as `pfedmma run` configures it.
type ServeConfig struct {
	Experiment *config.Experiment
	// Model is the checkpoint (the configuration's model, resolved).
	Model string
	// Listen is the gRPC address, HTTP the dashboard's (empty: none; a
	// bare port is loopback only). HTTPTokenFile holds a bearer token that
	// opens the dashboard besides operator certificates; Linger keeps the
	// dashboard up that long after the last round.
	Listen, HTTP  string
	HTTPTokenFile string
	Linger        time.Duration
	// Certs is the certificates folder (pfedmma certs init); Insecure runs
	// without TLS (local development only), with the site names of Sites
	// (client i is Sites[i]) instead of a certificates folder's.
	Certs    string
	Insecure bool
	Sites    []string
	// Preset names the configuration's preset on the dashboard (may be
	// empty).
	Preset string
	// State holds the coordinator's database; Out the run's outputs
	// (default State/out).
	State, Out string
	// MinFit is the fewest sites that must answer for a round to close;
	// RoundTimeout the deadline of each round's training and evaluation.
	MinFit       int
	RoundTimeout time.Duration
	// RegisterTimeout, when positive, is how long the coordinator waits
	// for every site to register before starting with those online (at
	// least MinFit); OfflineAfter is how long without contact makes a site
	// offline (not asked; default three heartbeats, 15 s).
	RegisterTimeout, OfflineAfter time.Duration
	Logger                        *slog.Logger
}

// Serve runs the coordinator until the federation's last round, then writes
// the run's outputs to c.Out as `pfedmma run` writes them
// (WriteFederationReports) at once — c.Linger only keeps the dashboard up
// after that — and returns them when it stops. Restarted with the same configuration after a
// crash, it resumes from its state folder.
func Serve(ctx context.Context, c ServeConfig) (*experiment.Result, error) {
	if err := checkServeConfig(c); err != nil {
		return nil, err
	}
	if c.Out == "" {
		c.Out = filepath.Join(c.State, "out")
	}
	e := c.Experiment
	o, err := experiment.FromConfig(e, c.Model, e.Seed, c.Out)
	if err != nil {
		return nil, err
	}
	f, err := experiment.PrepareFederated(ctx, o, -1)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	spec, err := f.Spec()
	if err != nil {
		return nil, err
	}
	if err := nameSites(c, f, e.Federation.Fraction); err != nil {
		return nil, err
	}
	modelID, err := IdentifyModel(c.Model, e.Vocab)
	if err != nil {
		return nil, err
	}
	task, err := serveTask(e, modelID, spec)
	if err != nil {
		return nil, err
	}
	coord := serveCoordinator(o, f.Plan.Strategy, len(f.Task.Clients), c.MinFit, c.RoundTimeout, e.Fingerprint())
	if err := os.MkdirAll(c.State, 0o755); err != nil {
		return nil, err
	}
	logger := c.Logger
	if logger == nil {
		logger = slog.Default()
	}
	coord.Logger = logger
	w := &serveOutputs{o: o, f: f, out: c.Out, logger: logger}
	job := dashboard.Job{Name: e.Name, Method: f.Name, Preset: c.Preset, Protocol: f.Task.Protocol, Dataset: f.Dataset}
	_, err = transport.RunCoordinator(ctx, transport.CoordinatorConfig{
		Addr: c.Listen, HTTPAddr: c.HTTP, HTTPTokenFile: c.HTTPTokenFile, HTTPLinger: c.Linger, Fingerprint: e.Fingerprint(), Job: job,
		Finished: w.finished, CertsDir: c.Certs, Insecure: c.Insecure, Sites: c.Sites,
		StatePath: filepath.Join(c.State, "coordinator.db"), Spec: transport.Spec(spec), Compress: o.Compress, Logger: logger,
		RegisterTimeout: c.RegisterTimeout, OfflineAfter: c.OfflineAfter, Settings: taskSettings(e, modelID), Task: task,
	}, coord)
	return w.result(err)
}

// checkServeConfig refuses missing or contradictory flags of `pfedmma
// serve`.
func checkServeConfig(c ServeConfig) error {
	if c.State == "" || (c.Certs == "" && !c.Insecure) || c.Listen == "" {
		return errors.New("--listen, --certs and --state are required")
	}
	switch {
	case c.Insecure && c.Certs != "":
		return errors.New("--insecure-dev and --certs exclude each other (--insecure-dev serves clear text and would ignore the certificates; name the sites with --sites)")
	case c.Insecure && len(c.Sites) == 0:
		return errors.New("--insecure-dev needs --sites NAME,… (client i is the i-th name; with certificates they come from the certificates folder)")
	case !c.Insecure && len(c.Sites) > 0:
		return errors.New("--sites is for --insecure-dev only (with certificates the sites are the certificates folder's sites.txt)")
	}
	return nil
}

// nameSites names f's sites (--sites, or the certificates folder's, which
// must be as many as the configuration's clients) and refuses a --min-fit
// larger than the federation or than the sites a round samples.
func nameSites(c ServeConfig, f *experiment.Federated, fraction float64) error {
	f.SiteNames = c.Sites
	if c.Certs != "" {
		names, err := certs.Sites(c.Certs)
		if err != nil {
			return err
		}
		f.SiteNames = names
		if len(names) != len(f.Task.Clients) {
			return fmt.Errorf("%s lists %d sites but the configuration's federation.clients is %d: make them agree (certs add-site, or --set federation.clients=%d)",
				filepath.Join(c.Certs, "sites.txt"), len(names), len(f.Task.Clients), len(names))
		}
	}
	if c.MinFit > len(f.Task.Clients) {
		return fmt.Errorf("--min-fit %d is larger than the federation (federation.clients=%d)", c.MinFit, len(f.Task.Clients))
	}
	if n := federation.NewSampler(fraction, 0).Count(len(f.Task.Clients)); c.MinFit > n {
		// a round asks n sites: one that lost any would wait for more
		// answers than it asked for, forever
		return fmt.Errorf("--min-fit %d is larger than the %d sites a round samples (federation.fraction=%g of %d sites)", c.MinFit, n, fraction, len(f.Task.Clients))
	}
	return nil
}

// serveOutputs writes Serve's outputs as soon as the rounds end (--linger
// only keeps the dashboard up after that).
type serveOutputs struct {
	o      experiment.Options
	f      *experiment.Federated
	out    string
	logger *slog.Logger
	res    *experiment.Result
	werr   error
}

// finished writes the reports of hist; stopped by a signal
// (transport.ErrStopped), the rounds done are the run's outputs so far (the
// state folder resumes it).
func (w *serveOutputs) finished(hist *federation.History, err error) {
	stopped := errors.Is(err, transport.ErrStopped) && hist != nil && len(hist.Rounds) > 0
	if (err == nil || stopped) && hist != nil {
		if w.res, w.werr = experiment.WriteFederationReports(w.o, w.f, hist); w.werr == nil {
			w.logger.Info("results written", "out", w.out)
		} else {
			w.logger.Error("the results could not be written", "out", w.out, "err", w.werr)
		}
	}
}

// result is Serve's answer given the coordinator's error err: a stop by a
// signal with the rounds done written is a result, not a failure.
func (w *serveOutputs) result(err error) (*experiment.Result, error) {
	if errors.Is(err, transport.ErrStopped) {
		switch {
		case w.werr != nil:
			return nil, fmt.Errorf("%w; writing the outputs of the rounds done: %w", err, w.werr)
		case w.res == nil:
			return nil, fmt.Errorf("%w; no round was done, so no output was written", err)
		}
		w.logger.Warn("stopped: the outputs of the rounds done are written; restart with the same flags to resume", "why", err, "out", w.out)
		return w.res, nil
	}
	if err != nil {
		return nil, err
	}
	if w.werr != nil {
		return nil, w.werr
	}
	return w.res, nil
}

// serveCoordinator is the coordinator of Serve: `pfedmma run`'s schedule
// (Options.Federation), every site asked at once, failures tolerated, and
// the configuration's fingerprint sent with every round.
func serveCoordinator(o experiment.Options, strat federation.Strategy, clients, minFit int, timeout time.Duration, fingerprint string) *federation.Coordinator {
	co := o.Federation().Coordinator(strat)
	co.Parallel, co.TolerateFailures, co.MinFit, co.RoundTimeout = clients, true, minFit, timeout
	co.FitConfig = func(int) map[string]string { return map[string]string{FingerprintKey: fingerprint} }
	return co
}
