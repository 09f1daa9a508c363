package deploy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/transport"
)

// ParseClients reads a --clients value: client numbers and inclusive
// ranges separated by commas ("0-49", "0-9,20,30-31"), each client once.
// It returns them in increasing order.
func ParseClients(spec string) ([]int, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("--clients %q: %s (give client numbers and ranges such as 0-9,20)", spec, fmt.Sprintf(format, a...))
	}
	if strings.TrimSpace(spec) == "" {
		return nil, bad("empty")
	}
	seen := map[int]bool{}
	var ids []int
	num := func(s string) (int, error) {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return 0, bad("%q is not a client number", strings.TrimSpace(s))
		}
		return n, nil
	}
	for _, part := range strings.Split(spec, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := num(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = num(hi); err != nil {
				return nil, err
			}
			if b < a {
				return nil, bad("range %s runs backwards", strings.TrimSpace(part))
			}
		}
		if b-a >= 1<<20 {
			return nil, bad("range %s is too long", strings.TrimSpace(part))
		}
		for i := a; i <= b; i++ {
			if seen[i] {
				return nil, bad("client %d is listed twice", i)
			}
			seen[i] = true
			ids = append(ids, i)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// HostedSiteResult is one client a multi-client site process served.
type HostedSiteResult struct {
	ID    int
	Name  string
	State string
	// Over and OverFile: see SiteResult.
	Over     *transport.FederationOver
	OverFile string
}

// HostSites runs one site process for several clients of the federation
// (`pfedmma site --clients SPEC`): client i speaks with its own site
// certificate, the i-th of the certificates folder's sites.txt (with
// --insecure-dev, the i-th of --sites), so that the coordinator checks each
// hosted client as it checks a site process of its own. c.Name must be
// empty. The task (the coordinator's experiment) is fetched once, with the
// first hosted client's certificate, and checked as Site checks it; every
// client then registers with its own settings. The clients share one
// loaded model and frozen-prefix cache, and train and evaluate one after
// the other (the process's threads go to the client at work); each keeps
// its task, private state, metrics and final parameters in its own folder,
// STATE/site-NAME (STATE: c.State, default the working folder), the folder
// a single `pfedmma site --name NAME` started there keeps.
func HostSites(ctx context.Context, c SiteConfig, spec string) ([]HostedSiteResult, error) {
	switch {
	case c.Name != "":
		return nil, errors.New("--name and --clients exclude each other: with --clients each hosted client speaks with its own site certificate, named by the certificates folder's sites.txt (or --sites with --insecure-dev)")
	case c.Server == "" || c.Data == "" || (c.Certs == "" && !c.Insecure):
		return nil, errors.New("--server, --certs, --clients and --data are required")
	}
	ids, err := ParseClients(spec)
	if err != nil {
		return nil, err
	}
	if c.Experiment != nil {
		if err := clientsWithin(spec, ids, c.Experiment); err != nil {
			return nil, err
		}
	}
	names, err := hostedNames(c, spec, ids)
	if err != nil {
		return nil, err
	}
	if err := checkData(c.Data); err != nil {
		return nil, err
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	root := c.State
	if root == "" {
		root = "."
	}
	hosted := make([]SiteConfig, len(ids))
	for i := range ids {
		hosted[i] = c
		hosted[i].Name, hosted[i].State = names[i], filepath.Join(root, "site-"+names[i])
		hosted[i].Logger = c.Logger.With("client", ids[i])
	}
	if res, err := hostedOver(hosted, ids); err != nil || res != nil {
		return res, err
	}
	modelID, own, err := c.identify()
	if err != nil {
		return nil, err
	}
	task, err := transport.FetchTask(ctx, hosted[0].transport(), ids[0], own)
	var e *config.Experiment
	if err == nil {
		e, err = AcceptTask(task, c, modelID)
	} else if !errors.Is(err, transport.ErrMalformedTask) {
		return nil, err
	}
	if err == nil {
		err = siteData(e, c.Data)
	}
	if err == nil {
		err = clientsWithin(spec, ids, e)
	}
	for i := range hosted {
		if err == nil {
			err = keepTask(hosted[i].State, task)
		}
	}
	if err != nil {
		c.Logger.Error("the site process refuses the coordinator's task", "clients", spec, "reason", err)
		if rerr := transport.RefuseTask(ctx, hosted[0].transport(), ids[0], err.Error()); rerr != nil {
			c.Logger.Warn("the refusal could not be sent to the coordinator", "site", names[0], "err", rerr)
		}
		return nil, err
	}
	c.Logger.Info("task accepted", "clients", spec, "sites", strings.Join(names, ","), "fingerprint", task.Fingerprint, "methods", e.Methods, "rounds", e.Federation.Rounds)
	return hostFromTask(ctx, hosted, ids, e, task.Fingerprint, modelID)
}

// hostedOver returns the hosted clients' results when every one's state
// folder records that its federation finished (SiteConfig.federationOver):
// the process then does nothing. Otherwise nil: it serves them all.
func hostedOver(hosted []SiteConfig, ids []int) ([]HostedSiteResult, error) {
	res := make([]HostedSiteResult, len(hosted))
	for i, h := range hosted {
		over, path, err := h.federationOver()
		if err != nil || over == nil {
			return nil, err
		}
		res[i] = HostedSiteResult{ID: ids[i], Name: h.Name, State: h.State, Over: over, OverFile: path}
	}
	for i, h := range hosted {
		h.logOver(res[i].Over, res[i].OverFile)
	}
	return res, nil
}

// clientsWithin checks the hosted clients ids against e's federation.clients.
func clientsWithin(spec string, ids []int, e *config.Experiment) error {
	if n := e.Federation.Clients; n > 0 && ids[len(ids)-1] >= n {
		return fmt.Errorf("--clients %s: client %d is beyond the federation's clients 0..%d (federation.clients=%d)", spec, ids[len(ids)-1], n-1, n)
	}
	return nil
}

// hostFromTask builds the clients ids of experiment e once and serves them,
// client ids[i] as site hosted[i], until the federation ends (SiteFromTask
// for several clients).
func hostFromTask(ctx context.Context, hosted []SiteConfig, ids []int, e *config.Experiment, fingerprint string, model ModelID) ([]HostedSiteResult, error) {
	o, err := experiment.FromConfig(e, hosted[0].Model, e.Seed, hosted[0].State)
	if err != nil {
		return nil, err
	}
	f, err := experiment.PrepareFederated(ctx, o, ids[len(ids)-1])
	if err != nil {
		return nil, fmt.Errorf("--clients: %w", err)
	}
	defer f.Close()
	states := make([]string, len(hosted)-1)
	for i := range states {
		states[i] = hosted[i+1].State
	}
	uploads, err := hosted[0].acceptUploads(e, f, states...)
	if err != nil {
		return nil, hosted[0].refuseTask(ctx, ids[0], err)
	}
	res := make([]HostedSiteResult, len(ids))
	sites := make([]transport.HostedSite, len(ids))
	for i, id := range ids {
		h := hosted[i]
		if err := os.MkdirAll(h.State, 0o755); err != nil {
			return nil, err
		}
		res[i] = HostedSiteResult{ID: id, Name: h.Name, State: h.State}
		tc := h.transport()
		tc.StateDir, tc.Settings = filepath.Join(h.State, "state"), taskSettings(e, model)
		h.sitePolicy(&tc, e, uploads)
		sites[i] = transport.HostedSite{Config: tc,
			Client: &siteClient{Client: f.Client(id), fingerprint: fingerprint, metrics: filepath.Join(h.State, "metrics.jsonl")}}
	}
	if err := transport.RunSites(ctx, sites, 1); err != nil {
		return nil, err
	}
	for i, id := range ids {
		// a site restarted after its last task holds its initial state in
		// memory: keep what it saved
		if err := federation.NewSite(f.Client(id), sites[i].Config.StateDir).Restore(); err != nil {
			return nil, fmt.Errorf("site %s (client %d): %w", res[i].Name, id, err)
		}
		if err := f.WriteSite(res[i].State, id, map[string]string{"site": res[i].Name}); err != nil {
			return nil, fmt.Errorf("site %s (client %d): %w", res[i].Name, id, err)
		}
	}
	return res, nil
}

// hostedNames returns the site names of the hosted clients ids: their
// lines of the certificates folder's sites.txt, or of --sites with
// --insecure-dev.
func hostedNames(c SiteConfig, spec string, ids []int) ([]string, error) {
	var all []string
	from := "--sites"
	switch {
	case c.Insecure && c.Certs != "":
		return nil, errors.New("--insecure-dev and --certs exclude each other (--insecure-dev connects in clear text and would ignore the certificates; name the sites with --sites)")
	case c.Insecure && len(c.Sites) == 0:
		return nil, errors.New("--insecure-dev needs --sites NAME,… as the coordinator's (client i is the i-th name)")
	case !c.Insecure && len(c.Sites) > 0:
		return nil, errors.New("--sites is for --insecure-dev only (with certificates the sites are the certificates folder's sites.txt)")
	case c.Insecure:
		all = c.Sites
	default:
		var err error
		if all, err = certs.Sites(c.Certs); err != nil {
			return nil, err
		}
		from = filepath.Join(c.Certs, certs.SitesFile)
	}
	names := make([]string, len(ids))
	for i, id := range ids {
		if id >= len(all) {
			return nil, fmt.Errorf("--clients %s: client %d has no site: %s names %d sites (clients 0..%d)", spec, id, from, len(all), len(all)-1)
		}
		names[i] = all[id]
	}
	return names, nil
}
