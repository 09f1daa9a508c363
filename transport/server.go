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
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/pfedmma/pfedmma/coordstore"
	"github.com/pfedmma/pfedmma/dashboard"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/tensor"
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
	// Store, when set, records the site registry, accepted and refused
	// uploads and events.
	Store *coordstore.Store
	// PollWait is how long GetTask waits for a task (default 10 s);
	// Heartbeat the interval sites are asked to keep (default 5 s).
	PollWait  time.Duration
	Heartbeat time.Duration
	// OfflineAfter is how long without contact makes a site offline: it is
	// then not asked, and its pending task fails (default 3 heartbeats).
	OfflineAfter time.Duration
	// Settings, when set, is the coordinator's resolved configuration as
	// sorted "key=value" lines: a site that registers with other settings
	// is refused with the keys that differ.
	Settings []string
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
	subs     map[chan struct{}]bool
	regWake  chan struct{}
	started  int // the latest round whose first task was enqueued (-1: none)
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

// WaitRegistered blocks until every site has registered with this
// coordinator process or ctx ends. After deadline (when positive) it
// returns once at least minLive sites are online, logging the missing ones
// (and, until then, every deadline).
func (s *Server) WaitRegistered(ctx context.Context, deadline time.Duration, minLive int) error {
	var expire <-chan time.Time
	if deadline > 0 {
		tm := time.NewTimer(deadline)
		defer tm.Stop()
		expire = tm.C
	}
	late := false
	for {
		s.mu.Lock()
		var missing []string
		for _, st := range s.sites {
			if !st.live || !s.alive(st) {
				missing = append(missing, st.name)
			}
		}
		wake := s.regWake
		s.mu.Unlock()
		online := len(s.sites) - len(missing)
		if len(missing) == 0 {
			return nil
		}
		if late && online >= max(minLive, 1) {
			s.log.Warn("registration deadline passed: starting without the missing sites", "online", online, "missing", missing)
			s.event(0, "", "register-timeout", fmt.Sprintf("started without %v", missing))
			return nil
		}
		var tick <-chan time.Time
		if late {
			tick = time.After(min(deadline, time.Minute))
		} else {
			tick = time.After(min(time.Minute, s.cfg.OfflineAfter))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("transport: waiting for sites %v to register: %w", missing, ctx.Err())
		case <-wake:
		case <-expire:
			late, expire = true, nil
			if online < max(minLive, 1) {
				s.log.Warn("registration deadline passed with too few sites online (--min-fit): waiting", "online", online, "need", max(minLive, 1), "missing", missing)
			}
		case <-tick:
			if late {
				s.log.Warn("waiting for sites to register", "online", online, "need", max(minLive, 1), "missing", missing)
			}
		}
	}
}

// alive reports whether st is online: registered with this coordinator
// process and heard from within OfflineAfter. s.mu must be held.
func (s *Server) alive(st *siteState) bool {
	return st.live && !st.revoked && time.Since(st.lastContact) < s.cfg.OfflineAfter
}

// Unavailable says why client id is not available ("" when it is): it
// is the federation.Coordinator's Unavailable.
func (s *Server) Unavailable(id int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case id < 0 || id >= len(s.sites):
		return "unknown site"
	case s.sites[id].revoked:
		return fmt.Sprintf("site %q is revoked", s.sites[id].name)
	case !s.alive(s.sites[id]):
		return "offline (heartbeat missed)"
	}
	return ""
}

// Available reports whether client id is online (see ServerConfig.OfflineAfter);
// it is the federation.Coordinator's Available.
func (s *Server) Available(id int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return id >= 0 && id < len(s.sites) && s.alive(s.sites[id])
}

// SiteName returns client id's site name.
func (s *Server) SiteName(id int) string {
	if id >= 0 && id < len(s.sites) {
		return s.sites[id].name
	}
	return fmt.Sprint(id)
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
	}
	for _, st := range s.sites {
		close(st.wake)
		st.wake = make(chan struct{})
	}
	s.mu.Unlock()
	s.changed()
}

// AllToldDone reports whether every registered site was told the
// federation is over.
func (s *Server) AllToldDone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.sites {
		if st.registered && !st.toldDone && !st.revoked {
			return false
		}
	}
	return true
}

// Observe hooks the server's status and metrics into coord (chaining the
// OnRound and Progress already set) and records the rounds done so far.
func (s *Server) Observe(coord *federation.Coordinator, done []federation.RoundReport) {
	s.mu.Lock()
	s.status.Rounds = coord.Rounds
	s.status.History = slices.Clone(done)
	s.status.Round = len(done)
	s.status.Phase = "running"
	s.mu.Unlock()
	s.changed()
	onRound, progress := coord.OnRound, coord.Progress
	coord.OnRound = func(rep federation.RoundReport) error {
		s.metrics.Rounds.Inc()
		s.metrics.Participants.Set(float64(len(rep.Selected) - len(rep.Failures)))
		s.metrics.Failures.Add(float64(len(rep.Failures)))
		s.metrics.RoundSeconds.Observe(rep.Seconds)
		s.mu.Lock()
		s.status.History = append(s.status.History, rep)
		s.status.Round = rep.Round + 1
		s.mu.Unlock()
		s.roundEnded(rep)
		s.changed()
		if onRound != nil {
			return onRound(rep)
		}
		return nil
	}
	coord.Progress = func(p federation.Progress) {
		s.changed()
		if progress != nil {
			progress(p)
		}
	}
}

// Status implements dashboard.Source.
func (s *Server) Status() dashboard.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.status
	out.History = slices.Clone(s.status.History)
	out.Updated = time.Now()
	for _, st := range s.sites {
		ss := dashboard.SiteStatus{Name: st.name, ID: st.id, Registered: st.registered, NumExamples: st.numExamples,
			State: st.state, LastContact: st.lastContact, Online: time.Since(st.lastContact) < 3*s.cfg.Heartbeat,
			Refused: maps.Clone(st.refused)}
		if !ss.Online && st.registered && st.state != "done" && !st.revoked {
			ss.State = "offline"
		}
		out.Sites = append(out.Sites, ss)
	}
	out.Events = s.cfg.Events.Recent()
	return out
}

// Subscribe implements dashboard.Source.
func (s *Server) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	s.subs[ch] = true
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(s.subs, ch)
		s.mu.Unlock()
	}
}

func (s *Server) changed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (s *Server) event(round int, site, kind, msg string) {
	s.audit(dashboard.Event{Round: round, Site: site, Kind: kind, Message: msg})
	if s.cfg.Store == nil {
		return
	}
	if err := s.cfg.Store.Event(round, site, kind, msg); err != nil {
		s.log.Error("event not recorded", "round", round, "site", site, "err", err)
	}
}

// round is the current round. s.mu must not be held.
func (s *Server) round() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status.Round
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

// SettingsDiff compares two resolved configurations given as "key=value"
// lines and names each key whose value differs, with both values.
func SettingsDiff(coordinator, site []string) []string {
	parse := func(lines []string) map[string]string {
		m := map[string]string{}
		for _, l := range lines {
			k, v, _ := strings.Cut(l, "=")
			m[k] = v
		}
		return m
	}
	a, b := parse(coordinator), parse(site)
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	show := func(m map[string]string, k string) string {
		if v, ok := m[k]; ok {
			return v
		}
		return "(unset)"
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if show(a, k) != show(b, k) {
			out = append(out, fmt.Sprintf("%s: coordinator %s, site %s", k, show(a, k), show(b, k)))
		}
	}
	return out
}

func newTaskID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// checkVersion refuses another protocol version.
func (s *Server) checkVersion(v uint32, site string) error {
	if v != ProtocolVersion {
		s.metrics.Refused.WithLabelValues(ReasonVersion).Inc()
		s.log.Warn("refused: protocol version", "site", site, "version", v, "want", ProtocolVersion)
		return status.Errorf(codes.FailedPrecondition, "protocol version %d refused: this coordinator speaks version %d", v, ProtocolVersion)
	}
	return nil
}

// caller identifies the calling site: the CN of its verified certificate
// (which must agree with the claimed name, when one is given), or the
// claimed name in insecure mode. It updates the site's last contact.
func (s *Server) caller(ctx context.Context, claimed string) (*siteState, error) {
	return s.callerLive(ctx, claimed, true)
}

// callerLive is caller; with needLive, a site that has not registered with
// this coordinator process (it restarted) is told to register again.
func (s *Server) callerLive(ctx context.Context, claimed string, needLive bool) (*siteState, error) {
	name := claimed
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			name = ti.State.PeerCertificates[0].Subject.CommonName
			if claimed != "" && claimed != name {
				s.log.Warn("refused: claimed site name differs from certificate", "site", name, "claimed", claimed)
				return nil, status.Errorf(codes.PermissionDenied, "certificate of %q, request claims %q", name, claimed)
			}
		} else if !s.cfg.Insecure {
			return nil, status.Error(codes.Unauthenticated, "no client certificate")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.byName[name]
	if st == nil {
		s.log.Warn("refused: unknown site", "site", name)
		return nil, status.Errorf(codes.PermissionDenied, "unknown site %q", name)
	}
	if st.revoked {
		return nil, status.Errorf(codes.PermissionDenied, "site %q is revoked", name)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if sess := first(md.Get(sessionHeader)); sess != "" && st.session != "" && sess != st.session {
		if needLive {
			return nil, status.Errorf(codes.AlreadyExists, "site %q is served by another process now (one certificate, two sessions)", name)
		}
		return st, nil // Register decides; the other session's contact is kept
	}
	if needLive && !st.live {
		return nil, status.Errorf(codes.Unavailable, "site %q is not registered with this coordinator (it restarted): register again", name)
	}
	st.lastContact = time.Now()
	return st, nil
}

// Register implements pb.FederationServer.
func (s *Server) Register(ctx context.Context, req *pb.RegisterRequest) (*pb.RegisterReply, error) {
	if err := s.checkVersion(req.ProtocolVersion, req.Site); err != nil {
		return nil, err
	}
	st, err := s.callerLive(ctx, req.Site, false)
	if err != nil {
		return nil, err
	}
	if req.ClientId != int64(st.id) {
		s.log.Warn("refused: client ID", "site", st.name, "claimed_id", req.ClientId, "id", st.id)
		return nil, status.Errorf(codes.InvalidArgument, "site %q is client %d, not %d", st.name, st.id, req.ClientId)
	}
	if req.NumExamples < s.lim.MinExamples || req.NumExamples > s.lim.MaxExamples {
		s.metrics.Refused.WithLabelValues(ReasonExamples).Inc()
		s.log.Warn("refused: example count", "site", st.name, "num_examples", req.NumExamples)
		return nil, status.Errorf(codes.InvalidArgument, "example count %d outside [%d, %d]", req.NumExamples, s.lim.MinExamples, s.lim.MaxExamples)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	session := first(md.Get(sessionHeader))
	if s.cfg.Settings != nil {
		if theirs := md.Get(settingsHeader); len(theirs) > 0 {
			if diff := SettingsDiff(s.cfg.Settings, theirs); len(diff) > 0 {
				s.metrics.Refused.WithLabelValues(ReasonConfig).Inc()
				s.log.Error("refused: site's configuration differs", "site", st.name, "differing", diff)
				s.event(s.round(), st.name, "refused", "configuration differs: "+strings.Join(diff, "; "))
				return nil, status.Errorf(codes.FailedPrecondition, "this site's configuration differs from the coordinator's in %d setting(s): %s; start the site with the coordinator's --config/--preset/--set",
					len(diff), strings.Join(diff, "; "))
			}
		}
	}
	s.mu.Lock()
	if session != "" && st.session != "" && st.session != session && s.alive(st) {
		st.knocked = time.Now()
		s.mu.Unlock()
		s.metrics.Refused.WithLabelValues(ReasonDuplicate).Inc()
		s.log.Error("refused: a second process uses this site's certificate while the first is connected (or a restarted site before its old session expires)", "site", st.name, "peer", peerAddr(ctx), "expires_in", s.cfg.OfflineAfter-time.Since(st.lastContact))
		s.event(s.round(), st.name, "refused", "second session on one certificate, from "+peerAddr(ctx))
		return nil, status.Errorf(codes.AlreadyExists, "site %q is already connected from another process (one certificate, two sessions): stop the other process", st.name)
	}
	st.session, st.live = session, true
	first := !st.registered
	st.registered, st.numExamples = true, int(req.NumExamples)
	if st.state == "unregistered" || st.state == "offline" {
		st.state = "idle"
	}
	rec := coordstore.SiteRecord{Name: st.name, ClientID: st.id, NumExamples: st.numExamples, LastContact: st.lastContact, State: st.state}
	close(s.regWake)
	s.regWake = make(chan struct{})
	round := s.status.Round
	s.mu.Unlock()
	if s.cfg.Store != nil {
		if err := s.cfg.Store.PutSite(rec); err != nil {
			s.log.Error("coordinator storage error: site registry not written", "site", st.name, "err", err)
			return nil, status.Error(codes.Unavailable, "coordinator error: registration could not be recorded; retrying")
		}
	}
	s.log.Info("site registered", "round", round, "site", st.name, "client", st.id, "num_examples", req.NumExamples, "first", first)
	s.event(round, st.name, "register", fmt.Sprintf("client %d, %d examples", st.id, req.NumExamples))
	s.changed()
	return &pb.RegisterReply{ProtocolVersion: ProtocolVersion, ClientId: int64(st.id), HeartbeatSeconds: s.cfg.Heartbeat.Seconds()}, nil
}

// Heartbeat implements pb.FederationServer.
func (s *Server) Heartbeat(ctx context.Context, req *pb.HeartbeatRequest) (*pb.HeartbeatReply, error) {
	if err := s.checkVersion(req.ProtocolVersion, req.Site); err != nil {
		return nil, err
	}
	if _, err := s.caller(ctx, req.Site); err != nil {
		return nil, err
	}
	s.mu.Lock()
	r := s.status.Round
	s.mu.Unlock()
	return &pb.HeartbeatReply{Round: int64(r)}, nil
}

// GetTask implements pb.FederationServer.
func (s *Server) GetTask(req *pb.TaskRequest, stream grpc.ServerStreamingServer[pb.TaskChunk]) error {
	if err := s.checkVersion(req.ProtocolVersion, req.Site); err != nil {
		return err
	}
	st, err := s.caller(stream.Context(), req.Site)
	if err != nil {
		return err
	}
	timer := time.NewTimer(s.cfg.PollWait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		var t *task
		for _, q := range st.queue {
			if q.state == taskPending {
				t = q
				break
			}
		}
		finished, wake, revoked, failure := s.finished, st.wake, st.revoked, s.failure
		if t == nil && finished {
			st.toldDone, st.state = true, "done"
		}
		if t != nil {
			st.state = map[pb.TaskKind]string{pb.TaskKind_TASK_KIND_FIT: "training", pb.TaskKind_TASK_KIND_EVALUATE: "evaluating"}[t.kind]
		}
		s.mu.Unlock()
		switch {
		case revoked:
			return status.Errorf(codes.PermissionDenied, "site %q is revoked", st.name)
		case t != nil:
			s.changed()
			return s.sendTask(stream, t)
		case finished:
			s.changed()
			h := &pb.TaskHeader{ProtocolVersion: ProtocolVersion, Kind: pb.TaskKind_TASK_KIND_DONE}
			if failure != "" {
				h.Config = map[string]string{FailureKey: failure}
			}
			return stream.Send(&pb.TaskChunk{Part: &pb.TaskChunk_Header{Header: h}})
		}
		select {
		case <-wake:
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-timer.C:
			return stream.Send(&pb.TaskChunk{Part: &pb.TaskChunk_Header{Header: &pb.TaskHeader{ProtocolVersion: ProtocolVersion, Kind: pb.TaskKind_TASK_KIND_NONE}}})
		}
	}
}

func (s *Server) sendTask(stream grpc.ServerStreamingServer[pb.TaskChunk], t *task) error {
	h := &pb.TaskHeader{ProtocolVersion: ProtocolVersion, TaskId: t.id, Round: int64(t.round), Kind: t.kind, Config: t.config, Params: t.blob}
	if err := stream.Send(&pb.TaskChunk{Part: &pb.TaskChunk_Header{Header: h}}); err != nil {
		return err
	}
	if t.kind == pb.TaskKind_TASK_KIND_FIT || t.kind == pb.TaskKind_TASK_KIND_EVALUATE {
		for _, c := range chunks(t.data) {
			if err := stream.Send(&pb.TaskChunk{Part: &pb.TaskChunk_Data{Data: c}}); err != nil {
				return err
			}
		}
		s.metrics.BytesOut.Add(float64(len(t.data)))
	}
	s.log.Debug("task sent", "round", t.round, "site", t.site.name, "kind", t.kind.String(), "bytes", len(t.data))
	return nil
}

// claim finds the pending task an answer is for and marks it answering, or
// says why the answer is refused.
func (s *Server) claim(st *siteState, taskID string, round int, kind pb.TaskKind) (*task, *refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.answered[taskID] {
		return nil, refuse(ReasonReplay, "task %s was already answered (replayed upload)", taskID)
	}
	if r, ok := s.closed[taskID]; ok {
		return nil, refuse(ReasonRoundClosed, "round %d is closed; late upload refused", r)
	}
	var t *task
	for _, site := range s.sites {
		for _, q := range site.queue {
			if q.id == taskID {
				t = q
			}
		}
	}
	switch {
	case t == nil:
		return nil, refuse(ReasonUnknownTask, "unknown task %s (from before a coordinator restart?); ask for the current task", taskID)
	case t.site != st:
		return nil, refuse(ReasonWrongSite, "task %s belongs to site %q", taskID, t.site.name)
	case t.kind != kind:
		return nil, refuse(ReasonTaskMismatch, "task %s is a %s task", taskID, t.kind)
	case t.round != round:
		return nil, refuse(ReasonWrongRound, "task %s is for round %d, upload says round %d", taskID, t.round, round)
	case t.state == taskAnswering:
		return nil, refuse(ReasonReplay, "task %s is being answered (duplicate upload)", taskID)
	}
	t.state = taskAnswering
	return t, nil
}

// finish settles a claimed task with its result (or refusal).
func (s *Server) finish(t *task, res taskResult) {
	s.mu.Lock()
	t.state = taskDone
	s.answered[t.id] = true
	t.site.queue = slices.DeleteFunc(t.site.queue, func(q *task) bool { return q == t })
	t.site.state = "idle"
	s.mu.Unlock()
	t.done <- res
	s.changed()
}

func (s *Server) refused(st *siteState, round int, taskID string, r *refusal) {
	s.metrics.Refused.WithLabelValues(r.code).Inc()
	s.siteRefused(st, round, r)
	s.log.Warn("upload refused", "round", round, "site", st.name, "task", taskID, "reason", r.code, "detail", r.msg)
	if s.cfg.Store != nil {
		if err := s.cfg.Store.RecordRefusal(round, st.name, taskID, r.code+": "+r.msg); err != nil {
			s.log.Error("refusal not recorded", "round", round, "site", st.name, "err", err)
		}
	}
}

// UploadUpdate implements pb.FederationServer.
func (s *Server) UploadUpdate(stream grpc.ClientStreamingServer[pb.UpdateChunk, pb.UploadReply]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil {
		return status.Error(codes.InvalidArgument, "first message of an upload must be its header")
	}
	if err := s.checkVersion(h.ProtocolVersion, h.Site); err != nil {
		return err
	}
	st, err := s.caller(stream.Context(), h.Site)
	if err != nil {
		return err
	}
	round := int(h.Round)
	t, rf := s.claim(st, h.TaskId, round, pb.TaskKind_TASK_KIND_FIT)
	if rf != nil {
		s.refused(st, round, h.TaskId, rf)
		return stream.SendAndClose(&pb.UploadReply{Reason: rf.code + ": " + rf.msg})
	}
	params, n, rf := s.receive(stream, h)
	if rf == nil {
		rf = s.checkDeclared(st, h.NumExamples)
	}
	if rf != nil {
		s.refused(st, round, h.TaskId, rf)
		s.finish(t, taskResult{err: fmt.Errorf("site %q round %d: upload refused: %s", st.name, round, rf.msg)})
		return stream.SendAndClose(&pb.UploadReply{Reason: rf.code + ": " + rf.msg})
	}
	if s.cfg.Store != nil {
		if err := s.cfg.Store.RecordUpdate(coordstore.Update{TaskID: t.id, Round: round, Site: st.name, Kind: "fit",
			NumExamples: int(h.NumExamples), Bytes: n, SHA256: hexSum(h.Params.GetSha256())}); err != nil {
			rf := refuse(ReasonReplay, "%v", err)
			if !errors.Is(err, coordstore.ErrReplay) {
				s.log.Error("coordinator storage error: upload not recorded", "round", round, "site", st.name, "err", err)
				rf = refuse(ReasonCoordinator, "coordinator error: the upload could not be recorded; it will be asked again")
			}
			s.refused(st, round, h.TaskId, rf)
			s.finish(t, taskResult{err: fmt.Errorf("site %q round %d: %s", st.name, round, rf.msg)})
			return stream.SendAndClose(&pb.UploadReply{Reason: rf.code + ": " + rf.msg})
		}
	}
	s.metrics.BytesIn.Add(float64(n))
	s.log.Info("update accepted", "round", round, "site", st.name, "task", t.id, "bytes", n, "num_examples", h.NumExamples)
	s.finish(t, taskResult{fit: federation.FitRes{Params: params, NumExamples: int(h.NumExamples), Metrics: h.Metrics}})
	return stream.SendAndClose(&pb.UploadReply{Accepted: true})
}

// receive reads an upload's chunks and validates the tensors.
func (s *Server) receive(stream grpc.ClientStreamingServer[pb.UpdateChunk, pb.UploadReply], h *pb.UpdateHeader) (tensor.Named, int64, *refusal) {
	if h.NumExamples < s.lim.MinExamples || h.NumExamples > s.lim.MaxExamples {
		return nil, 0, refuse(ReasonExamples, "example count %d outside [%d, %d]", h.NumExamples, s.lim.MinExamples, s.lim.MaxExamples)
	}
	for k, v := range h.Metrics {
		if v != v {
			return nil, 0, refuse(ReasonMetrics, "metric %q is NaN", k)
		}
	}
	size := h.Params.GetSize()
	if size < 0 || size > s.lim.MaxUploadBytes {
		return nil, 0, refuse(ReasonTooLarge, "upload of %d bytes, limit %d", size, s.lim.MaxUploadBytes)
	}
	data := make([]byte, 0, size)
	for {
		c, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, 0, refuse(ReasonMalformed, "upload broken off: %v", err)
		}
		d := c.GetData()
		if c.GetHeader() != nil || int64(len(data)+len(d)) > size {
			return nil, 0, refuse(ReasonMalformed, "upload holds more than the %d declared bytes", size)
		}
		data = append(data, d...)
	}
	params, rf := decodeBlob(data, h.Params, s.cfg.Spec, s.lim)
	if rf != nil {
		return nil, 0, rf
	}
	return params, int64(len(data)), nil
}

// ReportEval implements pb.FederationServer.
func (s *Server) ReportEval(ctx context.Context, req *pb.EvalReport) (*pb.UploadReply, error) {
	if err := s.checkVersion(req.ProtocolVersion, req.Site); err != nil {
		return nil, err
	}
	st, err := s.caller(ctx, req.Site)
	if err != nil {
		return nil, err
	}
	round := int(req.Round)
	t, rf := s.claim(st, req.TaskId, round, pb.TaskKind_TASK_KIND_EVALUATE)
	if rf != nil {
		s.refused(st, round, req.TaskId, rf)
		return &pb.UploadReply{Reason: rf.code + ": " + rf.msg}, nil
	}
	if s.cfg.Store != nil {
		if err := s.cfg.Store.RecordUpdate(coordstore.Update{TaskID: t.id, Round: round, Site: st.name, Kind: "evaluate", NumExamples: int(req.NumExamples)}); err != nil {
			rf := refuse(ReasonReplay, "%v", err)
			if !errors.Is(err, coordstore.ErrReplay) {
				s.log.Error("coordinator storage error: evaluation not recorded", "round", round, "site", st.name, "err", err)
				rf = refuse(ReasonCoordinator, "coordinator error: the evaluation could not be recorded")
			}
			s.refused(st, round, req.TaskId, rf)
			s.finish(t, taskResult{err: fmt.Errorf("site %q round %d: %s", st.name, round, rf.msg)})
			return &pb.UploadReply{Reason: rf.code + ": " + rf.msg}, nil
		}
	}
	s.log.Info("evaluation accepted", "round", round, "site", st.name, "task", t.id)
	s.finish(t, taskResult{eval: federation.EvaluateRes{Metrics: req.Metrics, NumExamples: int(req.NumExamples)}})
	return &pb.UploadReply{Accepted: true}, nil
}

// RemoteProxy is the coordinator's federation.ClientProxy for one remote
// site: Fit and Evaluate enqueue a task that the site fetches with GetTask,
// and wait for its answer or the end of ctx (after which the task is closed
// and a late answer refused).
type RemoteProxy struct {
	s  *Server
	st *siteState
}

// ID implements federation.ClientProxy.
func (p *RemoteProxy) ID() int { return p.st.id }

// NumExamples implements federation.ClientProxy: the count the site
// declared when it registered.
func (p *RemoteProxy) NumExamples() int {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	return p.st.numExamples
}

// Fit implements federation.ClientProxy.
func (p *RemoteProxy) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	data, blob, err := encodeBlob(ins.Params)
	if err != nil {
		return federation.FitRes{}, fmt.Errorf("site %q round %d: %w", p.st.name, ins.Round, err)
	}
	t := &task{id: newTaskID(), site: p.st, round: ins.Round, kind: pb.TaskKind_TASK_KIND_FIT, config: ins.Config,
		data: data, blob: blob, done: make(chan taskResult, 1)}
	res, err := p.run(ctx, t)
	return res.fit, err
}

// Evaluate implements federation.ClientProxy: the evaluation task carries
// the strategy's evaluation tensors (ins.Params) as a fit task carries its
// download.
func (p *RemoteProxy) Evaluate(ctx context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	data, blob, err := encodeBlob(ins.Params)
	if err != nil {
		return federation.EvaluateRes{}, fmt.Errorf("site %q round %d: %w", p.st.name, ins.Round, err)
	}
	t := &task{id: newTaskID(), site: p.st, round: ins.Round, kind: pb.TaskKind_TASK_KIND_EVALUATE, config: ins.Config,
		data: data, blob: blob, done: make(chan taskResult, 1)}
	res, err := p.run(ctx, t)
	return res.eval, err
}

func (p *RemoteProxy) run(ctx context.Context, t *task) (taskResult, error) {
	s := p.s
	s.roundStarted(t.round)
	s.mu.Lock()
	if t.site.revoked {
		s.mu.Unlock()
		return taskResult{}, fmt.Errorf("site %q round %d %s: the site's certificate was revoked", t.site.name, t.round, t.kind)
	}
	t.site.queue = append(t.site.queue, t)
	close(t.site.wake)
	t.site.wake = make(chan struct{})
	s.mu.Unlock()
	tk := time.NewTicker(min(s.cfg.Heartbeat, s.cfg.OfflineAfter))
	defer tk.Stop()
	offline := false
wait:
	for {
		select {
		case r := <-t.done:
			return r, r.err
		case <-ctx.Done():
			break wait
		case <-tk.C:
			s.mu.Lock()
			// a site whose restarted process waits to take over keeps
			// its task
			gone := s.cfg.GiveUpOffline && t.state == taskPending && !s.alive(t.site) && time.Since(t.site.knocked) > s.cfg.OfflineAfter
			s.mu.Unlock()
			if gone {
				offline = true
				break wait
			}
		}
	}
	s.mu.Lock()
	if t.state == taskAnswering || t.state == taskDone {
		// the answer is arriving: take it
		s.mu.Unlock()
		r := <-t.done
		return r, r.err
	}
	t.state = taskClosed
	s.closed[t.id] = t.round
	t.site.queue = slices.DeleteFunc(t.site.queue, func(q *task) bool { return q == t })
	s.mu.Unlock()
	if offline {
		s.log.Warn("site went offline (heartbeat missed): not waiting for its answer", "round", t.round, "site", t.site.name, "kind", t.kind.String())
		s.event(t.round, t.site.name, "offline", fmt.Sprintf("%s task given up: no contact for %s", t.kind, s.cfg.OfflineAfter))
		return taskResult{}, fmt.Errorf("site %q round %d %s: offline (no contact for %s)", t.site.name, t.round, t.kind, s.cfg.OfflineAfter)
	}
	s.log.Warn("round closed without the site's answer", "round", t.round, "site", t.site.name, "kind", t.kind.String())
	return taskResult{}, fmt.Errorf("site %q round %d %s: no answer: %w", t.site.name, t.round, t.kind, ctx.Err())
}
