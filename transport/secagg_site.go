package transport

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/secagg"
	"github.com/pfedmma/pfedmma/transport/pb"
)

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
	log = log.With("secagg", sa.id[:12])
	n := res.NumExamples
	if n == 0 {
		n = r.Site.NumExamples()
	}
	req := func(step pb.SecAggStep, payload []byte) *pb.SecAggRequest {
		return &pb.SecAggRequest{ProtocolVersion: r.version(), Site: r.Name, TaskId: h.TaskId, Round: h.Round,
			Session: sa.id, Step: step, Payload: payload}
	}
	abandon := func(why error) error {
		log.Error("secure aggregation failed: this site gives up the round", "err", why)
		_, err := cli.SecAgg(ctx, req(pb.SecAggStep_SEC_AGG_STEP_MASKED, nil))
		return err
	}
	call := func(q *pb.SecAggRequest) ([]byte, error) {
		rep, err := cli.SecAgg(ctx, q)
		if err != nil {
			return nil, err
		}
		if !rep.Accepted {
			return nil, fmt.Errorf("coordinator refused step %s: %s", q.Step, rep.Reason)
		}
		if r.SecAggHook != nil {
			r.SecAggHook(q.Step.String(), int(h.Round))
		}
		return rep.Payload, nil
	}
	x, layout := federation.Flatten(res.Params)
	w, err := federation.SecureWeight(n, sa.uniform)
	if err != nil {
		return abandon(err)
	}
	cfg, err := secagg.NewConfig(sa.session, sa.sites, len(x), sa.opts)
	if err != nil {
		return abandon(err)
	}
	c, err := secagg.NewClient(cfg, r.Site.ID(), nil)
	if err != nil {
		return abandon(err)
	}
	adv, err := c.Advertise()
	if err != nil {
		return abandon(err)
	}
	q := req(pb.SecAggStep_SEC_AGG_STEP_ADVERTISE, secagg.MarshalAdvertise(adv))
	for i, name := range layout.Names {
		shape := make([]int64, len(layout.Shapes[i]))
		for j, d := range layout.Shapes[i] {
			shape[j] = int64(d)
		}
		q.Layout = append(q.Layout, &pb.TensorInfo{Name: name, Dtype: "F32", Shape: shape})
	}
	keys, err := call(q)
	if err != nil {
		return abandon(err)
	}
	advs, err := secagg.UnmarshalAdvertiseList(keys)
	if err != nil {
		return abandon(err)
	}
	shares, err := c.ShareKeys(advs)
	if err != nil {
		return abandon(err)
	}
	inboxBytes, err := call(req(pb.SecAggStep_SEC_AGG_STEP_SHARE, secagg.MarshalShares(shares)))
	if err != nil {
		return abandon(err)
	}
	inbox, err := secagg.UnmarshalShares(inboxBytes)
	if err != nil {
		return abandon(err)
	}
	m, clipped, err := c.MaskInput(inbox, x, w)
	if err != nil {
		return abandon(err)
	}
	if clipped > 0 {
		log.Warn("secure aggregation clipped update values to its range", "values", clipped, "clip", cfg.Quant.Clip)
	}
	q = req(pb.SecAggStep_SEC_AGG_STEP_MASKED, secagg.MarshalMasked(m))
	q.NumExamples, q.Metrics = int64(n), res.Metrics
	survivorBytes, err := call(q)
	if err != nil {
		log.Warn("secure aggregation: masked update not used", "err", err)
		return nil
	}
	survivors, err := secagg.UnmarshalSurvivors(survivorBytes)
	if err != nil {
		log.Error("secure aggregation: survivor list unreadable", "err", err)
		return nil
	}
	rv, err := c.Unmask(survivors)
	if err != nil {
		log.Error("secure aggregation: unmasking refused", "err", err)
		return nil
	}
	if _, err := call(req(pb.SecAggStep_SEC_AGG_STEP_REVEAL, secagg.MarshalReveal(rv))); err != nil {
		log.Warn("secure aggregation: shares not taken", "err", err)
		return nil
	}
	log.Info("secure aggregation done", "survivors", len(survivors), "masked_bytes", len(q.Payload))
	return nil
}
