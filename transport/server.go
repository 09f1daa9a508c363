// Package transport runs a federation over the network: a gRPC service on
// the coordinator (Server) whose per-site ClientProxies let an unchanged
// federation.Coordinator drive remote sites, and the site side (SiteRunner)
// that serves a federation.Site to it, with mTLS (package certs), the
// coordinator's state in SQLite (package coordstore) and the operations
// endpoints of package dashboard.
//
// The protocol is server-driven over client pull: a site registers, then
// long-polls GetTask. A proxy's Fit enqueues a task for its site and blocks
// until the site's upload is accepted, refused, or ctx ends (the round's
// deadline); a task whose round closed refuses late uploads. Every upload is
// checked against the method's Spec and Limits before it reaches the
// strategy. A site that reconnects gets its pending task again; sites keep
// their own state (federation.Site), so a redone task gives the same result.
package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/compress"
	"github.com/pfedmma/pfedmma/coordstore"
	"github.com/pfedmma/pfedmma/dashboard"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/transport/pb"
)

// ServerConfig configures the coordinator's gRPC service.
type ServerConfig struct {
	// Sites lists the federation's site names: site i is client ID i (as in
	// certs.Sites).
	Sites []string
	// TLS is the mTLS configuration (certs.ServerTLS); a site's name is its
	// certificate's CN. Nil requires Insecure.
	TLS *tls.Config
	// Insecure serves in clear text and trusts the site names that requests
	// claim. For development only; it is logged loudly.
	Insecure bool
	// Spec declares the tensors a site uploads; Limits bound them.
	Spec   Spec
	Limits Limits
	// Compress encodes the tensors of every task and upload
	// (federation.compress; "" or none: float32 safetensors).
	Compress compress.Codec
	// Store, when set, records the site registry, accepted and refused
	// uploads and events.
	Store *coordstore.Store
	// PollWait is how long GetTask waits for a task (default 10 s);
	// Heartbeat the interval sites are asked to keep (default 5 s, at most
	// OfflineAfter/3).
	PollWait  time.Duration
	Heartbeat time.Duration
	// OfflineAfter is how long without contact makes a site offline: it is
	// then not asked, and its pending task fails (default 3 heartbeats).
	OfflineAfter time.Duration
	// Settings, when set, is the coordinator's resolved configuration as
	// sorted "key=value" lines: a site that registers with other settings
	// is refused with the keys that differ.
	Settings []string
	// Task, when set, is sent to the sites that ask for it at registration
	// (task.go): they build their clients from it.
	Task *Task
	// GiveUpOffline fails a site's pending task as soon as the site is
	// offline instead of waiting for it to come back (set when the
	// coordinator tolerates failures).
	GiveUpOffline bool
	// Metrics receives the Prometheus series (nil: new ones).
	Metrics *dashboard.Metrics
	// Events receives the event (audit) log (nil: kept in memory only).
	Events *dashboard.EventLog
	Logger *slog.Logger
}

// Server is the coordinator's gRPC service and the source of its proxies
// and dashboard status. Make it with NewServer.
type Server struct {
	pb.UnimplementedFederationServer

	cfg     ServerConfig
	lim     Limits
	log     *slog.Logger
	metrics *dashboard.Metrics
	grpc    *grpc.Server

	mu       sync.Mutex
	sites    []*siteState
	byName   map[string]*siteState
	closed   map[string]int  // task ID → round, for tasks whose round closed
	answered map[string]bool // task IDs whose answer was accepted or refused
	status   dashboard.Status
	finished bool
	failure  string // why the federation failed, told to the sites
	stopped  string // why the coordinator stopped early (Stop), told to the sites
	// restartedDone is set when the coordinator restarted on a finished
	// run (run.go): it then lingers for the sites of the run.
	restartedDone bool
	subs          map[chan struct{}]bool
	regWake       chan struct{}
	started       int                // the latest round whose first task was enqueued (-1: none)
	secAgg        *secAggregator     // secure aggregation (transport/secagg.go), nil when off
	revList       *certs.Revocations // the revocation list last read (revoke.go)
	// secAggTamper, set by tests before the rounds start, replaces what the
	// coordinator relays to a site in secure aggregation ("keys", "inbox",
	// "survivors", "signatures"): an adversarial coordinator.
	secAggTamper func(site int, what string, payload []byte) []byte

	// storageErr is the first failure of the coordinator's storage;
	// stopRun ends the run when it happens (storage.go).
	storageErr error
	stopRun    func(error)
}

type siteState struct {
	name        string
	id          int
	registered  bool
	numExamples int
	lastContact time.Time
	// session is the registration token of the site process serving it;
	// live is set once it registered with this coordinator process.
	session string
	live    bool
	// instance is the session's site instance (kept in the site's state
	// folder): a new session with the same instance is the site restarted
	// and takes over at once. replaced holds the sessions taken over.
	instance string
	replaced map[string]bool
	// cert is the certificate the current session registered with (nil
	// in insecure mode).
	cert *x509.Certificate
	// knocked is when another session last asked to register (a
	// restarted site, or a duplicate): its task is kept for it meanwhile.
	knocked  time.Time
	state    string
	toldDone bool
	refused  map[string]int // refused uploads by reason
	revoked  bool           // cut off by Revoke
	queue    []*task
	wake     chan struct{}
}

type taskState int

const (
	taskPending taskState = iota
	taskAnswering
	taskDone
	taskClosed
)

type task struct {
	id     string
	site   *siteState
	round  int
	kind   pb.TaskKind
	config map[string]string
	data   []byte
	blob   *pb.Blob
	state  taskState
	done   chan taskResult
}

type taskResult struct {
	fit  federation.FitRes
	eval federation.EvaluateRes
	err  error
}

// NewServer checks cfg and makes the server; Serve starts it.
func NewServer(cfg ServerConfig) (*Server, error) {
	if len(cfg.Sites) == 0 {
		return nil, errors.New("transport: no sites")
	}
	if cfg.TLS == nil && !cfg.Insecure {
		return nil, errors.New("transport: no TLS configuration (Insecure must be asked for explicitly)")
	}
	if cfg.PollWait <= 0 {
		cfg.PollWait = 10 * time.Second
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 5 * time.Second
	}
	if cfg.OfflineAfter <= 0 {
		cfg.OfflineAfter = 3 * cfg.Heartbeat
	}
	if cfg.Heartbeat > cfg.OfflineAfter/3 {
		// a short --offline-after needs sites that check in as often:
		// else a live site between two heartbeats would read offline
		cfg.Heartbeat = max(cfg.OfflineAfter/3, time.Millisecond)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = dashboard.NewMetrics()
	}
	if cfg.Events == nil {
		cfg.Events = &dashboard.EventLog{}
	}
	s := &Server{
		cfg: cfg, lim: cfg.Limits.withDefaults(), log: cfg.Logger, metrics: cfg.Metrics,
		byName: map[string]*siteState{}, closed: map[string]int{}, answered: map[string]bool{},
		subs: map[chan struct{}]bool{}, regWake: make(chan struct{}), started: -1,
	}
	for i, name := range cfg.Sites {
		if _, dup := s.byName[name]; dup {
			return nil, fmt.Errorf("transport: site %q listed twice", name)
		}
		st := &siteState{name: name, id: i, state: "unregistered", wake: make(chan struct{})}
		s.sites = append(s.sites, st)
		s.byName[name] = st
	}
	if cfg.Store != nil {
		recs, err := cfg.Store.Sites()
		if err != nil {
			return nil, fmt.Errorf("transport: %w", err)
		}
		for _, r := range recs {
			if st := s.byName[r.Name]; st != nil && st.id == r.ClientID {
				st.registered, st.numExamples, st.lastContact, st.state = true, r.NumExamples, r.LastContact, "offline"
			}
		}
	}
	if cfg.Spec == nil {
		s.log.Warn("no upload spec: tensor names and shapes of uploads are not checked")
	}
	s.status.Phase = "waiting"
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(MaxMessageSize), grpc.MaxSendMsgSize(MaxMessageSize)}
	if cfg.Insecure {
		s.log.Warn("INSECURE: serving the federation in clear text, trusting claimed site names (--insecure-dev)")
	} else {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	s.grpc = grpc.NewServer(opts...)
	pb.RegisterFederationServer(s.grpc, s)
	s.metrics.Watch(s.Status)
	return s, nil
}

// GRPC returns the underlying gRPC server (to Serve on a listener, Stop).
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Metrics returns the server's Prometheus series.
func (s *Server) Metrics() *dashboard.Metrics { return s.metrics }

// Proxies returns one federation.ClientProxy per site, in client-ID order.
func (s *Server) Proxies() []federation.ClientProxy {
	out := make([]federation.ClientProxy, len(s.sites))
	for i, st := range s.sites {
		out[i] = &RemoteProxy{s: s, st: st}
	}
	return out
}

// Finish marks the federation over: sites polling for tasks are told so.
func (s *Server) Finish(hist *federation.History, err error) {
	s.mu.Lock()
	s.finished = true
	if hist != nil {
		s.status.History = slices.Clone(hist.Rounds)
	}
	s.status.Phase = "done"
	if err != nil {
		s.status.Phase, s.status.Error = "failed", err.Error()
		s.failure = err.Error()
		if errors.Is(err, ErrCoordinatorStorage) {
			s.failure = ErrCoordinatorStorage.Error() + " (its operator has the details in its log)"
		}
	}
	for _, st := range s.sites {
		close(st.wake)
		st.wake = make(chan struct{})
	}
	s.mu.Unlock()
	s.changed()
}

// Stop marks the federation over before its last round (the coordinator
// was stopped, ErrStopped): sites polling for tasks are told so, with why,
// and end without error.
func (s *Server) Stop(hist *federation.History, why string) {
	s.mu.Lock()
	s.stopped = why
	s.mu.Unlock()
	s.Finish(hist, nil)
	s.mu.Lock()
	s.status.Phase, s.status.Error = "stopped", why
	s.mu.Unlock()
	s.changed()
}

// AllToldDone reports whether every registered site that is online was
// told the federation is over (an offline one is not waited for).
func (s *Server) AllToldDone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.sites {
		if st.registered && !st.toldDone && !st.revoked && s.alive(st) {
			return false
		}
	}
	return true
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return "?"
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
