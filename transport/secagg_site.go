package transport

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/secagg"
	"github.com/pfedmma/pfedmma/transport/pb"
)

// DefaultSecAggMinSites is a site's default minimum of sites in a
// secure-aggregation round (listed, advertising signed keys and surviving):
// itself and at least one other certified site. A coordinator cannot then
// run a round of the site alone or with identities it made up; with two
// sites each learns the other's update from the mean, so a site that wants
// more sets SecAggSite.MinSites.
const DefaultSecAggMinSites = 2

// SecAggSite is a site's own settings for secure aggregation, whatever the
// coordinator's task says.
type SecAggSite struct {
	// MinSites: the site refuses a round with fewer sites listed,
	// advertising keys or surviving (0: DefaultSecAggMinSites).
	MinSites int
	// Names is the federation's site list (certs' sites.txt: client ID →
	// site name) when the site has it: a neighbour's keys must then be
	// signed by the certificate of that ID's name, and a round naming an
	// ID outside the list is refused. Without it the neighbours'
	// certificates must chain to the CA and be distinct.
	Names []string
	// Check, when set, refuses a neighbour's certificate for the caller's
	// reasons (an operator certificate; a revoked site).
	Check func(*x509.Certificate) error
}

// secAggAuth sets the site's minimum and, with mTLS, its signing identity
// (its TLS client certificate and key) and the CA its neighbours' keys are
// checked against. Without TLS (--insecure-dev) the keys are not
// authenticated, which the log says.
func (r *SiteRunner) secAggAuth(c *secagg.Client, log *slog.Logger) error {
	if err := c.RequireSites(max(r.SecAgg.MinSites, DefaultSecAggMinSites)); err != nil {
		return err
	}
	if r.TLS == nil {
		log.Warn("secure aggregation without certificates (insecure): the relayed keys are not authenticated, which holds against an honest-but-curious coordinator only")
		return nil
	}
	if len(r.TLS.Certificates) == 0 || len(r.TLS.Certificates[0].Certificate) == 0 || r.TLS.RootCAs == nil {
		return errors.New("secure aggregation: the site's TLS configuration has no certificate or no CA to sign and check keys with")
	}
	cert := r.TLS.Certificates[0]
	key, ok := cert.PrivateKey.(crypto.Signer)
	if !ok {
		return fmt.Errorf("secure aggregation: the site's certificate key (%T) cannot sign", cert.PrivateKey)
	}
	return c.Authenticate(secagg.Identity{Cert: cert.Certificate[0], Key: key},
		secagg.Authority{Roots: r.TLS.RootCAs, Names: r.SecAgg.Names, Check: r.SecAgg.Check})
}

// secAggSite is a site's secure-aggregation settings from its certificates
// folder: sites.txt when the folder has it, and a check that refuses an
// operator's certificate and, when the folder has revoked.txt, a revoked
// site's.
func secAggSite(dir string, minSites int) (SecAggSite, error) {
	sa := SecAggSite{MinSites: minSites}
	if _, err := os.Stat(filepath.Join(dir, certs.SitesFile)); err == nil {
		if sa.Names, err = certs.Sites(dir); err != nil {
			return sa, err
		}
	}
	sa.Check = func(c *x509.Certificate) error {
		if certs.IsOperator(c) {
			return errors.New("an operator's certificate, not a site's")
		}
		rev, err := certs.ReadRevocations(dir)
		if err != nil {
			return err
		}
		if bad, why := rev.Revokes(c); bad {
			return fmt.Errorf("site %q is revoked: %s (%s)", c.Subject.CommonName, why, filepath.Join(dir, certs.RevokedFile))
		}
		return nil
	}
	return sa, nil
}

// secAggTask is a fit task's secure-aggregation session, as its settings
// describe it.
type secAggTask struct {
	id      string
	session [32]byte
	sites   []int
	opts    secagg.Options
	uniform bool
}

// splitSecAgg separates a fit task's secure-aggregation settings from the
// rest (what the site's Fit receives); nil when the task has none.
func splitSecAgg(cfg map[string]string) (map[string]string, *secAggTask, error) {
	id, ok := cfg[SecAggSessionKey]
	if !ok {
		return cfg, nil, nil
	}
	rest := maps.Clone(cfg)
	for k := range rest {
		if strings.HasPrefix(k, "secagg.") {
			delete(rest, k)
		}
	}
	t := &secAggTask{id: id}
	b, err := hex.DecodeString(id)
	if err != nil || len(b) != 32 {
		return nil, nil, fmt.Errorf("secure aggregation: session %q is not 64 hex digits", id)
	}
	copy(t.session[:], b)
	for _, f := range strings.Split(cfg[secAggSitesKey], ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, nil, fmt.Errorf("secure aggregation: site list %q: %w", cfg[secAggSitesKey], err)
		}
		t.sites = append(t.sites, n)
	}
	atoi := func(k string) int {
		if err != nil {
			return 0
		}
		var n int
		n, err = strconv.Atoi(cfg[k])
		return n
	}
	t.opts.Degree, t.opts.Threshold = atoi(secAggDegreeKey), atoi(secAggThresholdKey)
	t.opts.ScaleBits = uint(atoi(secAggScaleKey))
	if err == nil {
		t.opts.Clip, err = strconv.ParseFloat(cfg[secAggClipKey], 64)
	}
	if err == nil {
		t.uniform, err = strconv.ParseBool(cfg[secAggUniformKey])
	}
	if err != nil {
		return nil, nil, fmt.Errorf("secure aggregation: settings %v: %w", cfg, err)
	}
	return rest, t, nil
}

// secAggUpload answers a fit task by secure aggregation: keys, shares,
// the masked update (the task's answer) and the revealed shares. A step the
// coordinator refuses ends the site's part in the round (the site then
// tells it so with an empty masked update, which fails the task at once).
func (r *SiteRunner) secAggUpload(ctx context.Context, cli pb.FederationClient, h *pb.TaskHeader, sa *secAggTask, res federation.FitRes, log *slog.Logger) error {
	e := &secAggExchange{r: r, ctx: ctx, cli: cli, h: h, sa: sa, log: log.With("secagg", sa.id[:12])}
	n := res.NumExamples
	if n == 0 {
		n = r.Site.NumExamples()
	}
	x, layout := federation.Flatten(res.Params)
	c, cfg, w, err := e.client(n, len(x))
	if err != nil {
		return e.abandon(err)
	}
	inbox, err := e.exchangeKeys(c, layout)
	if err != nil {
		return e.abandon(err)
	}
	m, clipped, err := c.MaskInput(inbox, x, w)
	if err != nil {
		return e.abandon(err)
	}
	if clipped > 0 {
		e.log.Warn("secure aggregation clipped update values to its range", "values", clipped, "clip", cfg.Quant.Clip)
	}
	q := e.req(pb.SecAggStep_SEC_AGG_STEP_MASKED, secagg.MarshalMasked(m))
	q.NumExamples, q.Metrics = int64(n), res.Metrics
	survivorBytes, err := e.call(q)
	if err != nil {
		e.log.Warn("secure aggregation: masked update not used", "err", err)
		return nil
	}
	return e.reveal(c, survivorBytes, len(q.Payload))
}

// secAggExchange is one site's secure-aggregation exchange with the
// coordinator for one fit task.
type secAggExchange struct {
	r   *SiteRunner
	ctx context.Context
	cli pb.FederationClient
	h   *pb.TaskHeader
	sa  *secAggTask
	log *slog.Logger
}

// req is the request of one step with payload.
func (e *secAggExchange) req(step pb.SecAggStep, payload []byte) *pb.SecAggRequest {
	return &pb.SecAggRequest{ProtocolVersion: e.r.version(), Site: e.r.Name, TaskId: e.h.TaskId, Round: e.h.Round,
		Session: e.sa.id, Step: step, Payload: payload}
}

// call sends q and returns the coordinator's payload, or an error when it
// refuses the step.
func (e *secAggExchange) call(q *pb.SecAggRequest) ([]byte, error) {
	rep, err := e.cli.SecAgg(e.ctx, q)
	if err != nil {
		return nil, err
	}
	if !rep.Accepted {
		return nil, fmt.Errorf("coordinator refused step %s: %s", q.Step, rep.Reason)
	}
	if e.r.SecAggHook != nil {
		e.r.SecAggHook(q.Step.String(), int(e.h.Round))
	}
	return rep.Payload, nil
}

// abandon gives up the round before the masked update: an empty one tells
// the coordinator.
func (e *secAggExchange) abandon(why error) error {
	e.log.Error("secure aggregation failed: this site gives up the round", "err", why)
	_, err := e.cli.SecAgg(e.ctx, e.req(pb.SecAggStep_SEC_AGG_STEP_MASKED, nil))
	return err
}

// giveUp ends the site's part after the masked update: an empty reveal
// tells the coordinator that this site reveals nothing.
func (e *secAggExchange) giveUp(what string, why error) error {
	e.log.Error("secure aggregation: "+what+": this site reveals nothing", "err", why)
	_, err := e.cli.SecAgg(e.ctx, e.req(pb.SecAggStep_SEC_AGG_STEP_REVEAL, nil))
	return err
}

// client makes this site's secure-aggregation client for an update of
// length values over n examples, and its weight.
func (e *secAggExchange) client(n, length int) (*secagg.Client, *secagg.Config, uint64, error) {
	w, err := federation.SecureWeight(n, e.sa.uniform)
	if err != nil {
		return nil, nil, 0, err
	}
	opts := e.sa.opts
	opts.Round = int(e.h.Round)
	cfg, err := secagg.NewConfig(e.sa.session, e.sa.sites, length, opts)
	if err != nil {
		return nil, nil, 0, err
	}
	c, err := secagg.NewClient(cfg, e.r.Site.ID(), nil)
	if err != nil {
		return nil, nil, 0, err
	}
	if err := e.r.secAggAuth(c, e.log); err != nil {
		return nil, nil, 0, err
	}
	return c, cfg, w, nil
}

// exchangeKeys advertises c's keys with the update's layout, shares its
// secrets with the other sites and returns the shares they sent.
func (e *secAggExchange) exchangeKeys(c *secagg.Client, layout federation.Layout) ([]secagg.EncryptedShare, error) {
	adv, err := c.Advertise()
	if err != nil {
		return nil, err
	}
	q := e.req(pb.SecAggStep_SEC_AGG_STEP_ADVERTISE, secagg.MarshalAdvertise(adv))
	for i, name := range layout.Names {
		shape := make([]int64, len(layout.Shapes[i]))
		for j, d := range layout.Shapes[i] {
			shape[j] = int64(d)
		}
		q.Layout = append(q.Layout, &pb.TensorInfo{Name: name, Dtype: "F32", Shape: shape})
	}
	keys, err := e.call(q)
	if err != nil {
		return nil, err
	}
	advs, err := secagg.UnmarshalAdvertiseList(keys)
	if err != nil {
		return nil, err
	}
	shares, err := c.ShareKeys(advs)
	if err != nil {
		return nil, err
	}
	inboxBytes, err := e.call(e.req(pb.SecAggStep_SEC_AGG_STEP_SHARE, secagg.MarshalShares(shares)))
	if err != nil {
		return nil, err
	}
	return secagg.UnmarshalShares(inboxBytes)
}

// reveal signs the survivor set, checks the others' signatures and
// reveals the shares that unmask the sum (maskedBytes: the size of this
// site's masked update, for the log).
func (e *secAggExchange) reveal(c *secagg.Client, survivorBytes []byte, maskedBytes int) error {
	survivors, err := secagg.UnmarshalSurvivors(survivorBytes)
	if err != nil {
		return e.giveUp("survivor list unreadable", err)
	}
	cs, err := c.SignSurvivors(survivors)
	if err != nil {
		return e.giveUp("survivors refused", err)
	}
	// the consistency round travels in the reveal step, before the shares
	sigBytes, err := e.call(e.req(pb.SecAggStep_SEC_AGG_STEP_REVEAL, secagg.MarshalConsistency(cs)))
	if err != nil {
		e.log.Warn("secure aggregation: survivor-set signature not taken", "err", err)
		return nil
	}
	sigs, err := secagg.UnmarshalConsistencyList(sigBytes)
	if err != nil {
		return e.giveUp("survivor-set signatures unreadable", err)
	}
	rv, err := c.Unmask(sigs)
	if err != nil {
		return e.giveUp("unmasking refused", err)
	}
	if _, err := e.call(e.req(pb.SecAggStep_SEC_AGG_STEP_REVEAL, secagg.MarshalReveal(rv))); err != nil {
		e.log.Warn("secure aggregation: shares not taken", "err", err)
		return nil
	}
	e.log.Info("secure aggregation done", "survivors", len(survivors), "masked_bytes", maskedBytes)
	return nil
}
