package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/compress"
	"github.com/pfedmma/pfedmma/coordstore"
	"github.com/pfedmma/pfedmma/dashboard"
	"github.com/pfedmma/pfedmma/federation"
)

// CoordinatorConfig is everything `pfedmma serve` needs besides the
// federation.Coordinator itself.
type CoordinatorConfig struct {
	// Addr is the gRPC listen address (host:port; port 0 picks one).
	Addr string
	// HTTPAddr, when set, serves the dashboard, /metrics and /healthz (over
	// TLS with the coordinator's certificate unless Insecure); a bare port
	// listens on loopback only (HTTPListenAddr). Everything but /healthz
	// requires an operator certificate (certs.AddOperator) or the bearer
	// token of HTTPTokenFile.
	HTTPAddr      string
	HTTPTokenFile string
	// HTTPLinger keeps the dashboard up that long after the last round
	// (--linger), so that the finished run can still be looked at.
	HTTPLinger time.Duration
	// Fingerprint is the configuration's fingerprint, shown on the
	// dashboard; Job the run's identity, shown there too.
	Fingerprint string
	Job         dashboard.Job
	// Finished, when set, is called once the rounds are over (hist nil or
	// err set when they failed), before the coordinator lingers for the
	// sites and the dashboard (HTTPLinger): the run's outputs are written
	// there, not when the lingering ends.
	Finished func(hist *federation.History, err error)
	// CertsDir is the certificates folder (certs.Init): the server's mTLS
	// configuration and, when Sites is empty, the site list come from it.
	CertsDir string
	// Sites overrides the site list of CertsDir (site i is client ID i).
	Sites []string
	// Insecure serves in clear text (--insecure-dev), loudly.
	Insecure bool
	// StatePath is the SQLite database of the coordinator's state; a run
	// whose database holds a checkpoint resumes from it. The event log,
	// EventsFile, is written beside it.
	StatePath string
	// Spec and Limits validate uploads; see ServerConfig.
	Spec   Spec
	Limits Limits
	// Compress encodes every message's tensors (federation.compress).
	Compress compress.Codec
	// PollWait, Heartbeat, OfflineAfter and Settings: see ServerConfig.
	PollWait, Heartbeat, OfflineAfter time.Duration
	Settings                          []string
	// Task is sent to the sites that ask for it; see ServerConfig.
	Task *Task
	// RegisterTimeout, when positive, is how long the coordinator waits
	// for every site to register before it starts with the sites online
	// (at least coord.MinFit of them), logging the missing ones; zero
	// waits for all.
	RegisterTimeout time.Duration
	// RetryEvery is how often a round below coord.MinFit logs the missing
	// sites while it waits for them (default 1 minute); see
	// federation.Coordinator.RetryEvery.
	RetryEvery time.Duration
	// Linger is how long the coordinator keeps serving after the last round
	// so that every site learns the federation is over (default PollWait +
	// 2 s).
	Linger time.Duration
	Logger *slog.Logger
	// Ready, when set, is called with the bound addresses and the server
	// once both listen.
	Ready func(grpcAddr, httpAddr string, srv *Server)
}

// RunCoordinator serves the federation and drives coord over the remote
// sites: it opens the state database, listens, waits until every site has
// registered, then resumes from the stored checkpoint or starts afresh, and
// returns the history once every round is done and the sites were told so.
// It sets coord.Proxies and coord.Store, and chains coord.OnRound and
// coord.Progress; every other field of coord (Strategy, Rounds, Fraction,
// Seed, Parallel, TolerateFailures, MinFit, RoundTimeout, ...) is the
// caller's. With Parallel ≤ 1 it asks one site at a time; set it to the
// number of sites to train them concurrently.
func RunCoordinator(ctx context.Context, cfg CoordinatorConfig, coord *federation.Coordinator) (*federation.History, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	sites, tlsCfg, httpTLS, err := coordinatorTLS(cfg, log)
	if err != nil {
		return nil, err
	}
	if coord != nil && coord.MinFit > len(sites) {
		return nil, fmt.Errorf("--min-fit %d is larger than the federation's %d sites", coord.MinFit, len(sites))
	}
	if cfg.StatePath == "" {
		return nil, errors.New("transport: no state database path")
	}
	store, err := coordstore.Open(cfg.StatePath)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	events, err := OpenEvents(cfg.StatePath)
	if err != nil {
		return nil, err
	}
	defer events.Close()
	srv, err := newCoordinatorServer(cfg, coord, sites, tlsCfg, store, events, log)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen %s: %w", cfg.Addr, err)
	}
	go srv.GRPC().Serve(lis)
	defer srv.GRPC().Stop()
	if cfg.CertsDir != "" {
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		go srv.WatchRevocations(wctx, cfg.CertsDir, RevocationInterval)
	}
	httpAddr, closeHTTP, err := serveDashboard(cfg, srv, httpTLS, log)
	if err != nil {
		return nil, err
	}
	defer closeHTTP()
	log.Info("coordinator listening", "addr", lis.Addr().String(), "http", httpAddr, "sites", len(sites), "state", cfg.StatePath)
	if cfg.Ready != nil {
		cfg.Ready(lis.Addr().String(), httpAddr, srv)
	}
	if coord == nil {
		// nothing to coordinate: serve the endpoints until ctx ends
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return coordinate(ctx, cfg, coord, srv, store, httpAddr, log)
}

// coordinatorTLS reads the federation's sites (cfg.Sites, else the
// certificates folder's) and, unless insecure, the TLS configurations of
// the gRPC server and of the operators' HTTP endpoints.
func coordinatorTLS(cfg CoordinatorConfig, log *slog.Logger) (sites []string, tlsCfg, httpTLS *tls.Config, err error) {
	sites = cfg.Sites
	if cfg.CertsDir != "" && len(sites) == 0 {
		if sites, err = certs.Sites(cfg.CertsDir); err != nil {
			return nil, nil, nil, err
		}
	}
	if cfg.Insecure {
		return sites, nil, nil, nil
	}
	if cfg.CertsDir == "" {
		return nil, nil, nil, errors.New("transport: no certificates folder (or --insecure-dev)")
	}
	if tlsCfg, err = certs.ServerTLS(cfg.CertsDir, log); err != nil {
		return nil, nil, nil, err
	}
	if httpTLS, err = certs.OperatorsTLS(cfg.CertsDir); err != nil {
		return nil, nil, nil, err
	}
	return sites, tlsCfg, httpTLS, nil
}

// newCoordinatorServer makes the coordinator's server on its store and
// event log, its status primed with the job.
func newCoordinatorServer(cfg CoordinatorConfig, coord *federation.Coordinator, sites []string, tlsCfg *tls.Config,
	store *coordstore.Store, events *dashboard.EventLog, log *slog.Logger) (*Server, error) {
	srv, err := NewServer(ServerConfig{Sites: sites, TLS: tlsCfg, Insecure: cfg.Insecure, Spec: cfg.Spec, Limits: cfg.Limits,
		Compress: cfg.Compress,
		Store:    store, PollWait: cfg.PollWait, Heartbeat: cfg.Heartbeat, OfflineAfter: cfg.OfflineAfter, Settings: cfg.Settings, Task: cfg.Task,
		GiveUpOffline: coord != nil && coord.TolerateFailures, Logger: log, Events: events})
	if err != nil {
		return nil, err
	}
	srv.mu.Lock()
	srv.status.Fingerprint = cfg.Fingerprint
	if c := cmpCodec(cfg.Compress); c != compress.None {
		srv.status.Compress = string(c)
	}
	srv.mu.Unlock()
	if coord != nil {
		srv.Prime(cfg.Job, coord.Rounds)
	}
	return srv, nil
}

// serveDashboard serves the dashboard, /api/status and /metrics on
// cfg.HTTPAddr (when set) to operators; it returns the address and the
// function that closes it.
func serveDashboard(cfg CoordinatorConfig, srv *Server, httpTLS *tls.Config, log *slog.Logger) (string, func(), error) {
	if cfg.HTTPAddr == "" {
		return "", func() {}, nil
	}
	addr, err := HTTPListenAddr(cfg.HTTPAddr)
	if err != nil {
		return "", nil, err
	}
	token := ""
	if cfg.HTTPTokenFile != "" {
		if token, err = ReadToken(cfg.HTTPTokenFile); err != nil {
			return "", nil, err
		}
	}
	hl, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("transport: listen %s: %w", addr, err)
	}
	h := operatorsOnly(dashboard.Handler(srv, srv.Metrics()), token, httpTLS == nil && token == "")
	hs := &http.Server{Handler: h, TLSConfig: httpTLS, ReadHeaderTimeout: 10 * time.Second}
	if httpTLS != nil {
		go hs.ServeTLS(hl, "", "")
	} else {
		log.Warn("INSECURE: dashboard and metrics served in clear text (--insecure-dev)", "addr", hl.Addr().String())
		go hs.Serve(hl)
	}
	return hl.Addr().String(), func() { hs.Close() }, nil
}

// coordinate runs the federation's rounds on srv, tells the sites how it
// ended (done, failed, or stopped by a signal) and lingers as configured.
func coordinate(ctx context.Context, cfg CoordinatorConfig, coord *federation.Coordinator, srv *Server, store *coordstore.Store,
	httpAddr string, log *slog.Logger) (*federation.History, error) {
	// a failure of the coordinator's storage stops the run (storage.go)
	rctx, stopRun := srv.withStorageStop(ctx)
	defer stopRun()
	hist, err := runCoordinator(rctx, cfg, coord, srv, store)
	if err = srv.storageResult(err); errors.Is(err, ErrCoordinatorStorage) {
		log.Error("the coordinator's storage failed: stopping (the sites are told)", "err", err)
	}
	stopped := err != nil && ctx.Err() != nil && !errors.Is(err, ErrCoordinatorStorage)
	if stopped {
		// a signal (SIGTERM, Ctrl-C): tell the sites why, and end as a
		// stop, with the rounds done, not as a failure
		if hist == nil {
			hist = &federation.History{}
		}
		done := len(hist.Rounds)
		err = fmt.Errorf("%w after %d of %d rounds (restart it with the same flags to resume)", ErrStopped, done, coord.Rounds)
		log.Warn("stopped by a signal: telling the sites", "rounds_done", done, "rounds", coord.Rounds)
		srv.Stop(hist, err.Error())
	} else {
		srv.Finish(hist, err)
	}
	if cfg.Finished != nil {
		cfg.Finished(hist, err)
	}
	srv.lingerTold(ctx, cfg.Linger, stopped || srv.restartedDone)
	if httpAddr != "" && cfg.HTTPLinger > 0 && !stopped {
		log.Info("federation done; the dashboard stays up (--linger)", "http", httpAddr, "for", cfg.HTTPLinger)
		select {
		case <-ctx.Done():
		case <-time.After(cfg.HTTPLinger):
		}
	}
	return hist, err
}

// ErrStopped is RunCoordinator's error when ctx ended (a signal) before the
// last round: the history holds the rounds done, and the sites were told.
var ErrStopped = errors.New("the coordinator was stopped")

// StoppedKey, in a DONE task's settings, carries why the coordinator
// stopped before the last round (ErrStopped): the site then exits 0 with
// the reason.
const StoppedKey = "coordinator_stopped"

// lingerTold keeps serving until every online site was told the
// federation is over (or that the coordinator failed or stopped), at most
// linger (default PollWait + 2 s). With all (a stop, or a restart on a
// finished run) it waits for every registered site, online or not, and
// even after ctx ended, since telling the sites is the point.
func (s *Server) lingerTold(ctx context.Context, linger time.Duration, all bool) {
	if linger <= 0 {
		linger = s.cfg.PollWait + 2*time.Second
	}
	deadline := time.Now().Add(linger)
	for time.Now().Before(deadline) && (all || ctx.Err() == nil) {
		if (all && s.allRegisteredTold()) || (!all && s.AllToldDone()) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// allRegisteredTold reports whether every site that ever registered (but
// the revoked ones) was told the federation is over.
func (s *Server) allRegisteredTold() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.sites {
		if st.registered && !st.toldDone && !st.revoked {
			return false
		}
	}
	return true
}

// finishedRun returns the stored history when the state database holds a
// finished run (every round of coord done), else nil.
func finishedRun(store *coordstore.Store, coord *federation.Coordinator) (*federation.History, error) {
	ck, err := store.Load()
	if errors.Is(err, federation.ErrNoCheckpoint) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if ck.NextRound < coord.Rounds {
		return nil, nil
	}
	return &ck.History, nil
}

// runCoordinator waits for the sites, then runs or resumes coord. On a
// state database whose run is finished it waits for no site: it restores
// the strategy and returns the stored history at once.
func runCoordinator(ctx context.Context, cfg CoordinatorConfig, coord *federation.Coordinator, srv *Server, store *coordstore.Store) (*federation.History, error) {
	log := srv.log
	fin, err := finishedRun(store, coord)
	if err != nil {
		return nil, err
	}
	if fin != nil {
		log.Info("this run is finished: every round is done (the state database holds it); nothing to run, the sites that connect are told so",
			"rounds", len(fin.Rounds), "state", cfg.StatePath)
		srv.event(len(fin.Rounds), "", "finished", fmt.Sprintf("restarted on a finished run (%d rounds): nothing to run", len(fin.Rounds)))
		srv.restartedDone = true
	} else if err := srv.WaitRegistered(ctx, cfg.RegisterTimeout, coord.MinFit); err != nil {
		return nil, err
	}
	coord.Proxies = srv.Proxies()
	srv.useSecureAggregation(coord)
	coord.Name = srv.SiteName
	coord.Departed = srv.Departed
	if coord.TolerateFailures {
		coord.Available, coord.Unavailable = srv.Available, srv.Unavailable
	}
	if coord.TolerateFailures && coord.RetryEvery <= 0 {
		coord.RetryEvery = cfg.RetryEvery
		if coord.RetryEvery <= 0 {
			coord.RetryEvery = time.Minute
		}
	}
	coord.Store = checkpointStore{store, srv}
	done, err := store.Rounds()
	if err != nil {
		return nil, err
	}
	ck, lerr := store.Load()
	if lerr == nil {
		done = ck.History.Rounds
	}
	srv.Observe(coord, done)
	var hist *federation.History
	if lerr == nil {
		log.Info("resuming from the state database", "round", ck.NextRound)
		hist, err = coord.Resume(ctx)
	} else if errors.Is(lerr, federation.ErrNoCheckpoint) {
		hist, err = coord.Run(ctx)
	} else {
		return nil, lerr
	}
	return hist, err
}

// SiteConfig is everything `pfedmma site` needs besides its client.
type SiteConfig struct {
	// Addr is the coordinator's host:port; ServerName its name in its
	// certificate (default: the host of Addr).
	Addr       string
	ServerName string
	// CertsDir holds ca.crt and sites/<Name>.crt/.key.
	CertsDir string
	Name     string
	Insecure bool
	// StateDir is the site's state folder (federation.SiteStore).
	StateDir               string
	MinBackoff, MaxBackoff time.Duration
	// Settings is the site's resolved configuration ("key=value" lines),
	// checked by the coordinator at registration.
	Settings []string
	// DuplicateGrace: see SiteRunner.
	DuplicateGrace time.Duration
	Logger         *slog.Logger
	// SecAggHook: see SiteRunner.
	SecAggHook func(step string, round int)
	// SecAggMinSites: see SecAggSite.MinSites.
	SecAggMinSites int
	// Uploads, MaxUploadBytes, RequireSecureAggregation, MinParticipants
	// and MaxDownloadBytes are the site's own policy: see SiteRunner.
	Uploads                  Spec
	MaxUploadBytes           int64
	RequireSecureAggregation bool
	MinParticipants          int
	MaxDownloadBytes         int64
}

// RunSite serves client as site cfg.Name, its state kept in cfg.StateDir,
// until the federation is over. client.ID() must be the site's client ID
// (certs.SiteID).
func RunSite(ctx context.Context, cfg SiteConfig, client federation.Client) error {
	return runSite(ctx, cfg, federation.NewSite(client, cfg.StateDir))
}

// InstanceFile, in a site's state folder, holds the site's instance: a
// random identity made at its first start and sent at every registration,
// so that the coordinator knows a restarted site (same folder) from a
// second process with the same certificate and lets it take over at once.
const InstanceFile = "instance-id"

// siteInstance reads (or makes) the instance of state folder dir.
func siteInstance(dir string) (string, error) {
	path := filepath.Join(dir, InstanceFile)
	if b, err := os.ReadFile(path); err == nil {
		if id := strings.TrimSpace(string(b)); len(id) == 32 && strings.Trim(id, "0123456789abcdef") == "" {
			return id, nil
		}
		return "", fmt.Errorf("site state %s: not an instance identity (32 hex digits); remove the file to make a new one", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("site state: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("site state --state %s: %w", dir, err)
	}
	id := newTaskID()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("site state --state %s: %w", dir, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("site state --state %s: %w", dir, err)
	}
	return id, nil
}

// runSite serves site (a *federation.Site, possibly wrapped) as RunSite.
func runSite(ctx context.Context, cfg SiteConfig, site federation.ClientProxy) error {
	if cfg.StateDir != "" {
		id, err := siteInstance(cfg.StateDir)
		if err != nil {
			return fmt.Errorf("site %q: %w", cfg.Name, err)
		}
		ctx = metadata.AppendToOutgoingContext(ctx, instanceHeader, id)
	}
	r := &SiteRunner{Addr: cfg.Addr, Name: cfg.Name, Insecure: cfg.Insecure, Site: site,
		MinBackoff: cfg.MinBackoff, MaxBackoff: cfg.MaxBackoff, Logger: cfg.Logger, Settings: cfg.Settings, DuplicateGrace: cfg.DuplicateGrace,
		SecAggHook: cfg.SecAggHook, SecAgg: SecAggSite{MinSites: max(cfg.SecAggMinSites, cfg.MinParticipants)}, Uploads: cfg.Uploads, MaxUploadBytes: cfg.MaxUploadBytes, RequireSecureAggregation: cfg.RequireSecureAggregation,
		MinParticipants: cfg.MinParticipants, MaxDownloadBytes: cfg.MaxDownloadBytes}
	if !cfg.Insecure {
		host := cfg.ServerName
		if host == "" {
			h, _, err := net.SplitHostPort(cfg.Addr)
			if err != nil {
				return fmt.Errorf("site %q: address %q: %w", cfg.Name, cfg.Addr, err)
			}
			host = h
		}
		t, err := certs.SiteTLS(cfg.CertsDir, cfg.Name, host)
		if err != nil {
			return err
		}
		r.TLS = t
		if r.SecAgg, err = secAggSite(cfg.CertsDir, cfg.SecAggMinSites); err != nil {
			return err
		}
	}
	if err := r.Run(ctx); err != nil {
		return err
	}
	if r.ended != "" {
		if err := recordOver(cfg, r.ended, r.endReason); err != nil {
			r.logger().Warn("the federation's end could not be recorded: started again on this state folder, the site will wait for the coordinator", "site", cfg.Name, "err", err)
		}
	}
	return nil
}
