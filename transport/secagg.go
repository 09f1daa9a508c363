package transport

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pfedmma/pfedmma/coordstore"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/secagg"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/transport/pb"
)

// Settings of a fit task that asks for secure aggregation (FitIns.Config
// keys, added by the coordinator's secure aggregator and removed before the
// site's Fit sees them).
const (
	SecAggSessionKey   = "secagg.session"
	secAggSitesKey     = "secagg.sites"
	secAggDegreeKey    = "secagg.degree"
	secAggThresholdKey = "secagg.threshold"
	secAggClipKey      = "secagg.clip"
	secAggScaleKey     = "secagg.scale_bits"
	secAggUniformKey   = "secagg.uniform"
)

// secAggPoll is how often a step's barrier looks at the sites' liveness.
const secAggPoll = 50 * time.Millisecond

// useSecureAggregation replaces a coordinator's simulated secure
// aggregation (federation.SimulatedSecure, what `pfedmma run` uses) by the
// networked protocol with the same quantiser and weights: the result has
// the same bits, and the coordinator never holds an update in the clear.
// Every selected site's task must be out at once (the steps wait for all
// of them): the coordinator asks all its proxies in parallel.
func (s *Server) useSecureAggregation(coord *federation.Coordinator) {
	if sim, ok := coord.Secure.(*federation.SimulatedSecure); ok {
		coord.Parallel = max(coord.Parallel, len(coord.Proxies))
		coord.Secure = &secAggregator{s: s, quant: sim.Quant, uniform: sim.Uniform}
		s.mu.Lock()
		s.secAgg = coord.Secure.(*secAggregator)
		s.mu.Unlock()
		s.log.Info("secure aggregation on: the coordinator holds only masked updates and their sum",
			"bound", sim.Quant.Bound(), "uniform", sim.Uniform)
	}
}

// secAggregator is the networked federation.SecureAggregator: it runs one
// secure-aggregation session per round (per attempt of a retried round)
// with the round's selected sites.
type secAggregator struct {
	s       *Server
	quant   secagg.Quantizer
	uniform bool

	mu  sync.Mutex
	cur *secRound
}

// secRound is one session's state on the coordinator.
type secRound struct {
	round    int
	session  [32]byte
	id       string // hex session
	selected []int
	opts     secagg.Options
	degree   int
	thresh   int

	srv    *secagg.Server // made at the first advertisement (the length is then known)
	layout federation.Layout

	advertised map[int]bool
	keys       []byte
	keysErr    error
	keysDone   chan struct{}

	shared     map[int]bool
	sharesErr  error
	sharesDone chan struct{}

	masked     map[int]int // site → its example count
	metrics    map[int]map[string]float64
	survivors  []byte
	maskedErr  error
	maskedDone chan struct{}

	signed   map[int]bool // survivors whose survivor-set signature arrived
	gaveUp   map[int]bool // survivors that refused to sign or to unmask
	sigs     []byte
	consErr  error
	consDone chan struct{}

	revealed map[int]bool

	stop     chan struct{} // closed (end) when a newer session or the combination ends this one
	arrived  chan struct{} // closed and remade (under the aggregator's lock) when a step's message arrives
	stopOnce sync.Once
}

// arrive wakes the barriers (the aggregator's lock held).
func (r *secRound) arrive() {
	close(r.arrived)
	r.arrived = make(chan struct{})
}

// end stops the session's barriers and waiting steps.
func (r *secRound) end() { r.stopOnce.Do(func() { close(r.stop) }) }

// Begin implements federation.SecureAggregator: a new session for round's
// selected sites; the returned settings travel in every fit task.
func (a *secAggregator) Begin(round int, selected []int) (map[string]string, error) {
	var session [32]byte
	if _, err := rand.Read(session[:]); err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	if len(selected) < 2 {
		return nil, fmt.Errorf("round %d selects %d site: secure aggregation needs at least 2", round, len(selected))
	}
	opts := secagg.Options{Clip: a.quant.Clip, ScaleBits: a.quant.ScaleBits, Round: round}
	cfg, err := secagg.NewConfig(session, selected, 1, opts)
	if err != nil {
		return nil, err
	}
	r := &secRound{round: round, session: session, id: hex.EncodeToString(session[:]), selected: slices.Clone(selected),
		opts: opts, degree: cfg.Degree, thresh: cfg.Threshold,
		advertised: map[int]bool{}, keysDone: make(chan struct{}),
		shared: map[int]bool{}, sharesDone: make(chan struct{}),
		masked: map[int]int{}, metrics: map[int]map[string]float64{}, maskedDone: make(chan struct{}),
		signed: map[int]bool{}, gaveUp: map[int]bool{}, consDone: make(chan struct{}),
		revealed: map[int]bool{}, stop: make(chan struct{}), arrived: make(chan struct{})}
	r.opts.Degree, r.opts.Threshold, r.opts.Round = cfg.Degree, cfg.Threshold, round
	a.mu.Lock()
	if a.cur != nil {
		a.cur.end()
	}
	a.cur = r
	a.mu.Unlock()
	go a.drive(r)
	ids := make([]string, len(selected))
	for i, id := range selected {
		ids[i] = strconv.Itoa(id)
	}
	sites := strings.Join(ids, ",")
	if a.s.secAggTamper != nil {
		sites = string(a.s.secAggTamper(-1, "sites", []byte(sites)))
	}
	return map[string]string{
		SecAggSessionKey: r.id, secAggSitesKey: sites,
		secAggDegreeKey: strconv.Itoa(cfg.Degree), secAggThresholdKey: strconv.Itoa(cfg.Threshold),
		secAggClipKey: strconv.FormatFloat(a.quant.Clip, 'g', -1, 64), secAggScaleKey: strconv.Itoa(int(a.quant.ScaleBits)),
		secAggUniformKey: strconv.FormatBool(a.uniform),
	}, nil
}

// waitSites waits until every site of want has done (per done) or is no
// longer alive; false when the session was stopped. It looks again when a
// message arrives, and at least every secAggPoll (liveness).
func (a *secAggregator) waitSites(r *secRound, want []int, done func(id int) bool) bool {
	tk := time.NewTicker(secAggPoll)
	defer tk.Stop()
	for {
		a.mu.Lock()
		ready := true
		for _, id := range want {
			if !done(id) && a.s.aliveID(id) {
				ready = false
				break
			}
		}
		arrived := r.arrived
		a.mu.Unlock()
		if ready {
			return true
		}
		select {
		case <-r.stop:
			return false
		case <-arrived:
		case <-tk.C:
		}
	}
}

// drive closes the key-advertisement and key-sharing steps: each when every
// selected site has done it or is offline.
func (a *secAggregator) drive(r *secRound) {
	// (a site that gave up — refused the round — is not waited for)
	if !a.waitSites(r, r.selected, func(id int) bool { return r.advertised[id] || r.gaveUp[id] }) {
		return
	}
	a.mu.Lock()
	if r.srv == nil {
		r.keysErr = errors.New("no site advertised keys")
	} else {
		var adv []secagg.Advertise
		adv, r.keysErr = r.srv.KeysDone()
		r.keys = secagg.MarshalAdvertiseList(adv)
	}
	close(r.keysDone)
	failed := r.keysErr != nil
	advertised := slices.Sorted(maps.Keys(r.advertised))
	a.mu.Unlock()
	if failed {
		a.s.log.Warn("secure aggregation: key advertisement failed", "round", r.round, "err", r.keysErr)
		return
	}
	if !a.waitSites(r, advertised, func(id int) bool { return r.shared[id] || r.gaveUp[id] }) {
		return
	}
	a.mu.Lock()
	r.sharesErr = r.srv.SharesDone()
	close(r.sharesDone)
	a.mu.Unlock()
	if r.sharesErr != nil {
		a.s.log.Warn("secure aggregation: key sharing failed", "round", r.round, "err", r.sharesErr)
	}
}

// Combine implements federation.SecureAggregator: the round's fit phase is
// over (results are the sites whose masked update arrived); it names the
// survivors, waits for their shares and unmasks the sum.
func (a *secAggregator) Combine(ctx context.Context, round int, results []federation.FitResult) (federation.FitResult, error) {
	a.mu.Lock()
	r := a.cur
	a.mu.Unlock()
	if r == nil || r.round != round {
		return federation.FitResult{}, fmt.Errorf("round %d: no secure-aggregation session", round)
	}
	defer r.end()
	alive, err := a.closeMasked(round, r, results)
	if err != nil {
		return federation.FitResult{}, err
	}
	if err := a.consistencyRound(ctx, r, alive); err != nil {
		return federation.FitResult{}, err
	}
	return a.unmask(round, r, alive)
}

// closeMasked ends the masked-update step: every answer must be a masked
// update; it returns the sites whose masked updates arrived (the
// survivors).
func (a *secAggregator) closeMasked(round int, r *secRound, results []federation.FitResult) ([]int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, res := range results {
		if _, ok := r.masked[res.ClientID]; !ok {
			return nil, fmt.Errorf("round %d: site %q answered without a masked update", round, a.s.SiteName(res.ClientID))
		}
	}
	var alive []int
	if r.srv == nil {
		r.maskedErr = errors.New("no site advertised keys")
	} else {
		alive, r.maskedErr = r.srv.MaskedDone()
		r.survivors = secagg.MarshalSurvivors(alive)
	}
	close(r.maskedDone)
	return alive, r.maskedErr
}

// consistencyRound is the consistency round: it waits for the survivors'
// signatures over the survivor set (a survivor that goes offline or
// refuses is not waited for: the threshold decides), relays them, then
// waits for the shares of the survivors that signed.
func (a *secAggregator) consistencyRound(ctx context.Context, r *secRound, alive []int) error {
	if err := a.waitCtx(ctx, r, alive, func(id int) bool { return r.signed[id] || r.gaveUp[id] }); err != nil {
		return err
	}
	a.mu.Lock()
	sigs, err := r.srv.ConsistencyDone()
	r.consErr, r.sigs = err, secagg.MarshalConsistencyList(sigs)
	close(r.consDone)
	signers := r.srv.Signed()
	a.mu.Unlock()
	if err != nil {
		return err
	}
	return a.waitCtx(ctx, r, signers, func(id int) bool { return r.revealed[id] || r.gaveUp[id] })
}

// unmask removes the masks from the survivors' sum, checks its weight
// against the survivors' declared examples and returns the mean update.
func (a *secAggregator) unmask(round int, r *secRound, alive []int) (federation.FitResult, error) {
	a.mu.Lock()
	if n := len(r.revealed); n < r.thresh {
		gave := len(r.gaveUp)
		a.mu.Unlock()
		return federation.FitResult{}, fmt.Errorf("round %d: %d survivors revealed their shares, fewer than the threshold %d (%d sites refused to unmask: their logs say why)", round, n, r.thresh, gave)
	}
	res, err := r.srv.Finish()
	total := 0
	for _, id := range alive {
		total += r.masked[id]
	}
	layout := r.layout
	a.mu.Unlock()
	if err != nil {
		return federation.FitResult{}, err
	}
	var want uint64
	for _, id := range res.Survivors {
		w, _ := federation.SecureWeight(r.masked[id], a.uniform)
		want += w
	}
	if res.Weight != want {
		return federation.FitResult{}, fmt.Errorf("round %d: the unmasked weight %d is not the survivors' %d (a site masked another weight than it declared)", round, res.Weight, want)
	}
	p, err := layout.Unflatten(res.Mean)
	if err != nil {
		return federation.FitResult{}, err
	}
	a.s.log.Info("secure aggregation: unmasked the sum", "round", round, "survivors", len(res.Survivors), "dropped_after_sharing", len(res.Dropped))
	if len(res.Dropped) > 0 {
		names := make([]string, len(res.Dropped))
		for i, id := range res.Dropped {
			names[i] = a.s.SiteName(id)
		}
		a.s.event(round, "", "secagg_dropped", fmt.Sprintf("sites dropped after sharing keys, their masks removed: %s", strings.Join(names, ", ")))
	}
	return federation.FitResult{ClientID: res.Survivors[0], NumExamples: total, Params: p}, nil
}

// waitCtx is waitSites that also ends with ctx.
func (a *secAggregator) waitCtx(ctx context.Context, r *secRound, want []int, done func(id int) bool) error {
	ch := make(chan bool, 1)
	go func() { ch <- a.waitSites(r, want, done) }()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case ok := <-ch:
		if !ok {
			return errors.New("the round's secure-aggregation session ended")
		}
		return nil
	}
}

// relay is what the coordinator sends site st for a step: payload, or
// what the test hook Server.secAggTamper makes of it (an adversarial
// coordinator in the tests).
func (a *secAggregator) relay(st *siteState, what string, payload []byte) []byte {
	if a.s.secAggTamper != nil {
		return a.s.secAggTamper(st.id, what, payload)
	}
	return payload
}

// aliveID reports whether client id's site is alive (caller holds no lock).
func (s *Server) aliveID(id int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return id >= 0 && id < len(s.sites) && s.alive(s.sites[id])
}

func secAggRefuse(format string, args ...any) *pb.SecAggReply {
	return &pb.SecAggReply{Reason: fmt.Sprintf(format, args...)}
}

// SecAgg implements pb.FederationServer: one step of a site's secure
// aggregation (see the proto).
func (s *Server) SecAgg(ctx context.Context, req *pb.SecAggRequest) (*pb.SecAggReply, error) {
	if err := s.checkVersion(req.ProtocolVersion, req.Site); err != nil {
		return nil, err
	}
	st, err := s.caller(ctx, req.Site)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	a := s.secAgg
	s.mu.Unlock()
	if a == nil {
		// (a refusal, not an error: a restarted coordinator answers so
		// until its rounds start)
		return secAggRefuse("this coordinator runs no secure aggregation now"), nil
	}
	a.mu.Lock()
	r := a.cur
	a.mu.Unlock()
	if r == nil || r.id != req.Session || r.round != int(req.Round) {
		return secAggRefuse("secure-aggregation session %.12s… of round %d is not the current one", req.Session, req.Round), nil
	}
	if !slices.Contains(r.selected, st.id) {
		return secAggRefuse("site %q is not selected in round %d", st.name, r.round), nil
	}
	switch req.Step {
	case pb.SecAggStep_SEC_AGG_STEP_ADVERTISE:
		return a.advertise(ctx, r, st, req)
	case pb.SecAggStep_SEC_AGG_STEP_SHARE:
		return a.share(ctx, r, st, req)
	case pb.SecAggStep_SEC_AGG_STEP_MASKED:
		return a.maskedInput(ctx, r, st, req)
	case pb.SecAggStep_SEC_AGG_STEP_REVEAL:
		return a.reveal(ctx, r, st, req)
	}
	return secAggRefuse("unknown secure-aggregation step %v", req.Step), nil
}

// wait blocks until ch closes, the session stops or ctx ends.
func wait(ctx context.Context, r *secRound, ch chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-r.stop:
		select {
		case <-ch:
			return nil
		default:
		}
		return errors.New("the round's secure-aggregation session ended")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// layoutOf checks an advertised layout against the upload spec.
func (s *Server) layoutOf(infos []*pb.TensorInfo) (federation.Layout, error) {
	var l federation.Layout
	for _, ti := range infos {
		if ti.Dtype != "F32" {
			return l, fmt.Errorf("tensor %q has dtype %s, want F32", ti.Name, ti.Dtype)
		}
		shape := make([]int, len(ti.Shape))
		for i, d := range ti.Shape {
			if d < 0 || d > 1<<31 {
				return l, fmt.Errorf("tensor %q has shape %v", ti.Name, ti.Shape)
			}
			shape[i] = int(d)
		}
		if s.cfg.Spec != nil {
			want, ok := s.cfg.Spec[ti.Name]
			if !ok {
				return l, fmt.Errorf("tensor %q is not one the method uploads", ti.Name)
			}
			if !slices.Equal(want, shape) {
				return l, fmt.Errorf("tensor %q has shape %v, want %v", ti.Name, shape, want)
			}
		}
		if len(l.Names) > 0 && ti.Name <= l.Names[len(l.Names)-1] {
			return l, errors.New("tensors not in sorted order, or listed twice")
		}
		l.Names, l.Shapes = append(l.Names, ti.Name), append(l.Shapes, shape)
	}
	if s.cfg.Spec != nil && len(l.Names) != len(s.cfg.Spec) {
		return l, fmt.Errorf("%d tensors, the method uploads %d", len(l.Names), len(s.cfg.Spec))
	}
	if l.Len() == 0 {
		return l, errors.New("no values to aggregate")
	}
	if 8*(l.Len()+1)+64 > MaxMessageSize {
		return l, fmt.Errorf("%d values: a masked update of %d bytes exceeds the %d-byte message limit", l.Len(), 8*(l.Len()+1), MaxMessageSize)
	}
	return l, nil
}

func (a *secAggregator) advertise(ctx context.Context, r *secRound, st *siteState, req *pb.SecAggRequest) (*pb.SecAggReply, error) {
	adv, err := secagg.UnmarshalAdvertise(req.Payload)
	if err == nil && adv.From != st.id {
		err = fmt.Errorf("keys in the name of client %d", adv.From)
	}
	var layout federation.Layout
	if err == nil {
		layout, err = a.s.layoutOf(req.Layout)
	}
	a.mu.Lock()
	if err == nil {
		if r.srv == nil {
			cfg, cerr := secagg.NewConfig(r.session, r.selected, layout.Len(), r.opts)
			if cerr != nil {
				err = cerr
			} else {
				r.srv, r.layout = secagg.NewServer(cfg), layout
			}
		} else if !layout.Equal(r.layout) {
			err = fmt.Errorf("tensors %v differ from the other sites' %v", layout.Names, r.layout.Names)
		}
	}
	if err == nil {
		err = r.srv.ReceiveAdvertise(adv)
	}
	if err == nil {
		r.advertised[st.id] = true
		r.arrive()
	}
	a.mu.Unlock()
	if err != nil {
		a.s.log.Warn("secure aggregation: keys refused", "round", r.round, "site", st.name, "err", err)
		return secAggRefuse("keys refused: %v", err), nil
	}
	if err := wait(ctx, r, r.keysDone); err != nil {
		return secAggRefuse("%v", err), nil
	}
	if r.keysErr != nil {
		return secAggRefuse("key advertisement failed: %v", r.keysErr), nil
	}
	return &pb.SecAggReply{Accepted: true, Payload: a.relay(st, "keys", r.keys)}, nil
}

func (a *secAggregator) share(ctx context.Context, r *secRound, st *siteState, req *pb.SecAggRequest) (*pb.SecAggReply, error) {
	shares, err := secagg.UnmarshalShares(req.Payload)
	a.mu.Lock()
	if err == nil && r.srv == nil {
		err = errors.New("shares before keys")
	}
	if err == nil {
		err = r.srv.ReceiveShares(st.id, shares)
	}
	if err == nil {
		r.shared[st.id] = true
		r.arrive()
	}
	a.mu.Unlock()
	if err != nil {
		a.s.log.Warn("secure aggregation: shares refused", "round", r.round, "site", st.name, "err", err)
		return secAggRefuse("shares refused: %v", err), nil
	}
	if err := wait(ctx, r, r.sharesDone); err != nil {
		return secAggRefuse("%v", err), nil
	}
	if r.sharesErr != nil {
		return secAggRefuse("key sharing failed: %v", r.sharesErr), nil
	}
	a.mu.Lock()
	inbox, err := r.srv.Inbox(st.id)
	a.mu.Unlock()
	if err != nil {
		return secAggRefuse("%v", err), nil
	}
	return &pb.SecAggReply{Accepted: true, Payload: a.relay(st, "inbox", secagg.MarshalShares(inbox))}, nil
}

// maskedInput takes a site's masked update: it answers the site's fit task
// (with no tensors: the coordinator never holds the update) and returns the
// survivors once the fit phase is over.
func (a *secAggregator) maskedInput(ctx context.Context, r *secRound, st *siteState, req *pb.SecAggRequest) (*pb.SecAggReply, error) {
	s := a.s
	t, rf := s.claim(st, req.TaskId, r.round, pb.TaskKind_TASK_KIND_FIT)
	if rf != nil {
		s.refused(st, r.round, req.TaskId, rf)
		return secAggRefuse("%s: %s", rf.code, rf.msg), nil
	}
	var m secagg.MaskedInput
	err := errors.New("the site gave up secure aggregation in this round (its log says why)")
	if len(req.Payload) > 0 {
		m, err = secagg.UnmarshalMasked(req.Payload)
	} else {
		// the other sites' steps wait for it no longer
		a.mu.Lock()
		r.gaveUp[st.id] = true
		r.arrive()
		a.mu.Unlock()
	}
	if err == nil && m.From != st.id {
		err = fmt.Errorf("a masked update in the name of client %d", m.From)
	}
	if err == nil && (req.NumExamples < s.lim.MinExamples || req.NumExamples > s.lim.MaxExamples) {
		err = fmt.Errorf("example count %d outside [%d, %d]", req.NumExamples, s.lim.MinExamples, s.lim.MaxExamples)
	}
	if err == nil {
		if rf := s.checkDeclared(st, req.NumExamples); rf != nil {
			err = errors.New(rf.msg)
		}
	}
	a.mu.Lock()
	if err == nil && r.srv == nil {
		err = errors.New("a masked update before keys")
	}
	if err == nil {
		err = r.srv.ReceiveMasked(m)
	}
	if err == nil {
		r.masked[st.id] = int(req.NumExamples)
	}
	a.mu.Unlock()
	if err != nil {
		rf := refuse(ReasonMalformed, "masked update refused: %v", err)
		s.refused(st, r.round, req.TaskId, rf)
		s.finish(t, taskResult{err: fmt.Errorf("site %q round %d: %s", st.name, r.round, rf.msg)})
		return secAggRefuse("%s: %s", rf.code, rf.msg), nil
	}
	if s.cfg.Store != nil {
		if err := s.cfg.Store.RecordUpdate(coordstore.Update{TaskID: t.id, Round: r.round, Site: st.name, Kind: "fit-masked",
			NumExamples: int(req.NumExamples), Bytes: int64(len(req.Payload))}); err != nil {
			s.log.Error("coordinator storage error: masked update not recorded", "round", r.round, "site", st.name, "err", err)
		}
	}
	s.metrics.WireIn.Add(float64(len(req.Payload)))
	s.log.Info("masked update accepted", "round", r.round, "site", st.name, "task", t.id, "bytes", len(req.Payload))
	s.finish(t, taskResult{fit: federation.FitRes{Params: tensor.Named{}, NumExamples: int(req.NumExamples), Metrics: req.Metrics}})
	if err := wait(ctx, r, r.maskedDone); err != nil {
		return secAggRefuse("%v", err), nil
	}
	if r.maskedErr != nil {
		return secAggRefuse("unmasking refused: %v", r.maskedErr), nil
	}
	return &pb.SecAggReply{Accepted: true, Payload: a.relay(st, "survivors", r.survivors)}, nil
}

// reveal takes a survivor's REVEAL step: its signature over the survivor
// set (the consistency round; answered with every survivor's signature once
// the round closes), then its revealed shares; an empty payload says that
// the site refused to sign or to unmask (its log says why).
func (a *secAggregator) reveal(ctx context.Context, r *secRound, st *siteState, req *pb.SecAggRequest) (*pb.SecAggReply, error) {
	switch {
	case len(req.Payload) == 0:
		a.mu.Lock()
		r.gaveUp[st.id] = true
		r.arrive()
		a.mu.Unlock()
		a.s.log.Warn("secure aggregation: a site refused to unmask (its log says why)", "round", r.round, "site", st.name)
		return &pb.SecAggReply{Accepted: true}, nil
	case secagg.IsConsistency(req.Payload):
		return a.consistency(ctx, r, st, req)
	}
	rv, err := secagg.UnmarshalReveal(req.Payload)
	if err == nil && rv.From != st.id {
		err = fmt.Errorf("shares in the name of client %d", rv.From)
	}
	a.mu.Lock()
	select {
	case <-r.consDone:
	default:
		if err == nil {
			err = errors.New("shares revealed before the consistency round closed")
		}
	}
	if err == nil {
		err = r.srv.ReceiveReveal(rv)
	}
	if err == nil {
		r.revealed[st.id] = true
		r.arrive()
	}
	a.mu.Unlock()
	if err != nil {
		a.s.log.Warn("secure aggregation: revealed shares refused", "round", r.round, "site", st.name, "err", err)
		return secAggRefuse("revealed shares refused: %v", err), nil
	}
	return &pb.SecAggReply{Accepted: true}, nil
}

// consistency takes a survivor's signature over the survivor set and
// answers, once the consistency round closes, with the survivors'
// signatures (the sites check them: package secagg).
func (a *secAggregator) consistency(ctx context.Context, r *secRound, st *siteState, req *pb.SecAggRequest) (*pb.SecAggReply, error) {
	c, err := secagg.UnmarshalConsistency(req.Payload)
	if err == nil && c.From != st.id {
		err = fmt.Errorf("a survivor-set signature in the name of client %d", c.From)
	}
	a.mu.Lock()
	select {
	case <-r.maskedDone:
	default:
		if err == nil {
			err = errors.New("a survivor-set signature before the survivors were named")
		}
	}
	if err == nil {
		err = r.srv.ReceiveConsistency(c)
	}
	if err == nil {
		r.signed[st.id] = true
		r.arrive()
	}
	a.mu.Unlock()
	if err != nil {
		a.s.log.Warn("secure aggregation: survivor-set signature refused", "round", r.round, "site", st.name, "err", err)
		return secAggRefuse("survivor-set signature refused: %v", err), nil
	}
	if err := wait(ctx, r, r.consDone); err != nil {
		return secAggRefuse("%v", err), nil
	}
	if r.consErr != nil {
		return secAggRefuse("unmasking refused: %v", r.consErr), nil
	}
	return &pb.SecAggReply{Accepted: true, Payload: a.relay(st, "signatures", r.sigs)}, nil
}
