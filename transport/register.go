package transport

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/pfedmma/pfedmma/coordstore"
	"github.com/pfedmma/pfedmma/transport/pb"
)

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

// ReasonNoSession counts requests refused because they carry no session
// (the pfedmma-session header every site process sends).
const ReasonNoSession = "no_session"

// instanceHeader carries a site's instance: an identity kept in its state
// folder (run.go), the same across restarts of one site process.
const instanceHeader = "pfedmma-instance"

// caller identifies the calling site: the CN of its verified certificate
// (which must agree with the claimed name, when one is given), or the
// claimed name in insecure mode. It requires the site's current session
// and updates the site's last contact.
func (s *Server) caller(ctx context.Context, claimed string) (*siteState, error) {
	return s.callerLive(ctx, claimed, true)
}

// callerLive is caller; with needLive, a site that has not registered with
// this coordinator process (it restarted) is told to register again.
// Without needLive (Register) the request may come from another session,
// or from none (a site fetching its task before it registers): it then
// leaves the current session's last contact alone.
func (s *Server) callerLive(ctx context.Context, claimed string, needLive bool) (*siteState, error) {
	name, leaf, err := s.peerName(ctx, claimed)
	if err != nil {
		return nil, err
	}
	md, _ := metadata.FromIncomingContext(ctx)
	sess := first(md.Get(sessionHeader))
	if sess == "" && needLive {
		s.metrics.Refused.WithLabelValues(ReasonNoSession).Inc()
		s.log.Warn("refused: request without a session", "site", name, "peer", peerAddr(ctx))
		return nil, status.Errorf(codes.FailedPrecondition, "request of site %q carries no session (%s header): register first, with a site of this protocol version", name, sessionHeader)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.byName[name]
	if st == nil {
		s.log.Warn("refused: unknown site", "site", name)
		return nil, status.Errorf(codes.PermissionDenied, "unknown site %q", name)
	}
	if err := s.checkRevoked(st, leaf, !needLive); err != nil {
		return nil, err
	}
	if sess == "" || sess != st.session {
		if needLive {
			if st.replaced[sess] || st.session != "" {
				return nil, status.Errorf(codes.AlreadyExists, "site %q is served by another process now (one certificate, two sessions)", name)
			}
			return nil, status.Errorf(codes.Unavailable, "site %q is not registered with this coordinator (it restarted): register again", name)
		}
		return st, nil // Register decides; the current session's contact is kept
	}
	if needLive && !st.live {
		return nil, status.Errorf(codes.Unavailable, "site %q is not registered with this coordinator (it restarted): register again", name)
	}
	st.lastContact = time.Now()
	return st, nil
}

// peerName is the calling site's name (see caller) and its certificate
// (nil in insecure mode).
func (s *Server) peerName(ctx context.Context, claimed string) (string, *x509.Certificate, error) {
	leaf := peerLeaf(ctx)
	if leaf == nil {
		if !s.cfg.Insecure {
			return "", nil, status.Error(codes.Unauthenticated, "no client certificate")
		}
		return claimed, nil, nil
	}
	name := leaf.Subject.CommonName
	if claimed != "" && claimed != name {
		s.log.Warn("refused: claimed site name differs from certificate", "site", name, "claimed", claimed)
		return "", nil, status.Errorf(codes.PermissionDenied, "certificate of %q, request claims %q", name, claimed)
	}
	return name, leaf, nil
}

// peerLeaf is the caller's verified certificate (nil without TLS).
func peerLeaf(ctx context.Context) *x509.Certificate {
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			return ti.State.PeerCertificates[0]
		}
	}
	return nil
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
	if err := s.checkSettings(ctx, st); err != nil {
		return nil, err
	}
	if req.TaskWanted || req.TaskRefused != "" {
		return s.answerTask(st, req)
	}
	if req.NumExamples < s.lim.MinExamples || req.NumExamples > s.lim.MaxExamples {
		s.metrics.Refused.WithLabelValues(ReasonExamples).Inc()
		s.log.Warn("refused: example count", "site", st.name, "num_examples", req.NumExamples)
		return nil, status.Errorf(codes.InvalidArgument, "example count %d outside [%d, %d]", req.NumExamples, s.lim.MinExamples, s.lim.MaxExamples)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	session, instance := first(md.Get(sessionHeader)), first(md.Get(instanceHeader))
	if session == "" {
		s.metrics.Refused.WithLabelValues(ReasonNoSession).Inc()
		s.log.Warn("refused: registration without a session", "site", st.name, "peer", peerAddr(ctx))
		return nil, status.Errorf(codes.FailedPrecondition, "registration of site %q carries no session (%s header): use a site of this protocol version", st.name, sessionHeader)
	}
	s.mu.Lock()
	if dup, err := s.takeOver(ctx, st, session, instance); err != nil {
		round := s.status.Round
		s.mu.Unlock()
		if dup {
			s.event(round, st.name, "refused", "second session on one certificate, from "+peerAddr(ctx))
		}
		return nil, err
	}
	st.session, st.instance, st.live, st.lastContact = session, instance, true, time.Now()
	st.cert = peerLeaf(ctx)
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
			s.storageFailed(err)
			return nil, status.Error(codes.Unavailable, "coordinator error: registration could not be recorded; retrying")
		}
	}
	s.log.Info("site registered", "round", round, "site", st.name, "client", st.id, "num_examples", req.NumExamples, "first", first)
	s.event(round, st.name, "register", fmt.Sprintf("client %d, %d examples", st.id, req.NumExamples))
	s.changed()
	return &pb.RegisterReply{ProtocolVersion: ProtocolVersion, ClientId: int64(st.id), HeartbeatSeconds: s.cfg.Heartbeat.Seconds()}, nil
}

// takeOver decides whether session may serve st: a session replaced by a
// later one never may; a new session may once the current one is known
// dead (offline), or at once when it presents the current session's
// instance (the same state folder: the site restarted). Else it is a
// second process with the site's certificate, refused. s.mu is held.
func (s *Server) takeOver(ctx context.Context, st *siteState, session, instance string) (dup bool, err error) {
	if st.replaced[session] {
		s.metrics.Refused.WithLabelValues(ReasonDuplicate).Inc()
		return false, status.Errorf(codes.AlreadyExists, "site %q is served by a newer process of its state folder: this one is replaced; stop it", st.name)
	}
	if st.session == "" || st.session == session {
		return false, nil
	}
	restarted := instance != "" && instance == st.instance
	if s.alive(st) && !restarted {
		st.knocked = time.Now()
		s.metrics.Refused.WithLabelValues(ReasonDuplicate).Inc()
		s.log.Error("refused: a second process uses this site's certificate while the first is connected (or a restarted site before its old session expires)", "site", st.name, "peer", peerAddr(ctx), "expires_in", s.cfg.OfflineAfter-time.Since(st.lastContact))
		return true, status.Errorf(codes.AlreadyExists, "site %q is already connected from another process (one certificate, two sessions): stop the other process", st.name)
	}
	if st.replaced == nil {
		st.replaced = map[string]bool{}
	}
	st.replaced[st.session] = true
	why := "its previous session is offline"
	if restarted {
		why = "the same state folder registered again (the site restarted)"
	}
	s.log.Info("site's previous session replaced", "site", st.name, "why", why, "peer", peerAddr(ctx))
	return false, nil
}

// checkSettings refuses a site whose resolved configuration (sent at
// registration) differs from the coordinator's, naming the keys.
func (s *Server) checkSettings(ctx context.Context, st *siteState) error {
	if s.cfg.Settings == nil {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	theirs := md.Get(settingsHeader)
	if len(theirs) == 0 {
		return nil
	}
	diff := SettingsDiff(s.cfg.Settings, theirs)
	if len(diff) == 0 {
		return nil
	}
	s.metrics.Refused.WithLabelValues(ReasonConfig).Inc()
	s.log.Error("refused: site's configuration differs", "site", st.name, "differing", diff)
	s.event(s.round(), st.name, "refused", "configuration differs: "+strings.Join(diff, "; "))
	return status.Errorf(codes.FailedPrecondition, "this site's configuration differs from the coordinator's in %d setting(s): %s; start the site with the coordinator's --config/--preset/--set, or with none (it then receives the coordinator's)",
		len(diff), strings.Join(diff, "; "))
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
