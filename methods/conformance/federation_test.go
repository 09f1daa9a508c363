package conformance

import (
	"context"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/transport"
)

// privacy checks every upload of a site: it holds every global tensor of
// the strategy and nothing but declared shared tensors (names and shapes:
// the global ones and the plan's declared Uploads), and no private tensor
// of the client's state — by name or by value.
type privacy struct {
	// spec is every tensor a client may upload (experiment.Federated's
	// Spec), global the strategy's global ones, which every upload holds
	spec, global map[string][]int
	mu           sync.Mutex
	errs         []string
	n            int
}

func (p *privacy) fail(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errs = append(p.errs, fmt.Sprintf(format, args...))
}

// check inspects one upload against the uploading client's state.
func (p *privacy) check(id, round int, up, state tensor.Named) {
	p.mu.Lock()
	p.n++
	p.mu.Unlock()
	for name := range p.global {
		if _, ok := up[name]; !ok {
			p.fail("site %d round %d did not upload the shared %q", id, round, name)
		}
	}
	for name, t := range up {
		shape, ok := p.spec[name]
		if !ok {
			p.fail("site %d round %d uploaded %q, which the method does not declare shared (declared: %v)", id, round, name, slices.Sorted(maps.Keys(p.spec)))
		} else if !slices.Equal(shape, t.Shape) {
			p.fail("site %d round %d uploaded %q of shape %v, declared %v", id, round, name, t.Shape, shape)
		}
	}
	for key, priv := range state {
		// the client's own copy of a shared tensor ("param/<name>",
		// "adapter/<name>") is no private tensor
		if p.ownShared(key) {
			continue
		}
		if name, ok := strings.CutPrefix(key, "param/"); ok {
			if _, ok := up[name]; ok {
				p.fail("site %d round %d uploaded its private tensor %q", id, round, name)
			}
		}
		if len(priv.Data) < 4 || constant(priv.Data) {
			continue // too little to tell a leak from a coincidence
		}
		for name, t := range up {
			if len(t.Data) == len(priv.Data) && sameFloats(t.Data, priv.Data) {
				p.fail("site %d round %d uploaded the value of its private %q under %q", id, round, key, name)
			}
		}
	}
}

// ownShared reports whether a client-state key holds the client's copy of
// a declared shared tensor: the name itself, or the name after a prefix
// ending in "/".
func (p *privacy) ownShared(key string) bool {
	for name := range p.spec {
		if key == name || strings.HasSuffix(key, "/"+name) {
			return true
		}
	}
	return false
}

func constant(x []float32) bool {
	for _, v := range x {
		if math.Float32bits(v) != math.Float32bits(x[0]) {
			return false
		}
	}
	return true
}

func sameFloats(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func (p *privacy) report(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		t.Error("privacy: no upload was inspected")
	}
	for _, e := range p.errs {
		t.Error("privacy: " + e)
	}
}

// watched is a site's client whose uploads are checked for privacy, and
// that can be killed when it starts training a round.
type watched struct {
	federation.Client
	priv *privacy
	// killer, when set, may kill the site as it starts training (kill
	// stops its process).
	killer *killer
	kill   func()
}

// killer kills the first site that starts training a round ≥ round: the
// fit fails as a killed process's would, before anything is saved or
// uploaded.
type killer struct {
	mu     sync.Mutex
	round  int
	killed []int
}

func (k *killer) strike(id, round int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if round < k.round || len(k.killed) > 0 {
		return false
	}
	k.killed = append(k.killed, id)
	return true
}

func (w *watched) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	if w.killer != nil && w.kill != nil && w.killer.strike(w.ID(), ins.Round) {
		w.kill()
		<-ctx.Done()
		return federation.FitRes{}, ctx.Err()
	}
	res, err := w.Client.Fit(ctx, ins)
	if err == nil && w.priv != nil {
		st, serr := w.Client.State()
		if serr != nil {
			return res, serr
		}
		w.priv.check(w.ID(), ins.Round, res.Params, st)
	}
	return res, err
}

// federated is serve + sites of one run: the coordinator's federation and
// each site's, as `pfedmma serve` and `pfedmma site` prepare them.
type federated struct {
	t     *testing.T
	o     experiment.Options
	name  string
	coord *experiment.Federated
	mu    sync.Mutex
	sites []*experiment.Federated
	dirs  []string
	priv  *privacy
}

func newFederated(t *testing.T, o experiment.Options, name string) *federated {
	t.Helper()
	f := &federated{t: t, o: o, name: name}
	c, err := experiment.PrepareFederated(context.Background(), o, -1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	f.coord = c
	spec, err := c.Spec()
	if err != nil {
		t.Fatal(err)
	}
	global := map[string][]int{}
	for k, t := range c.Plan.Strategy.State() {
		if name, ok := strings.CutPrefix(k, "global/"); ok {
			global[name] = t.Shape
		}
	}
	f.priv = &privacy{spec: spec, global: global}
	base := t.TempDir()
	for i := range numClients {
		f.dirs = append(f.dirs, filepath.Join(base, fmt.Sprintf("site-%d", i)))
		f.sites = append(f.sites, nil)
		f.site(i)
	}
	return f
}

// site (re)prepares site i from scratch (a started or restarted process)
// and returns its client.
func (f *federated) site(i int) *watched {
	f.t.Helper()
	s, err := experiment.PrepareFederated(context.Background(), f.o, i)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(s.Close)
	f.mu.Lock()
	f.sites[i] = s
	f.mu.Unlock()
	return &watched{Client: s.Client(i), priv: f.priv}
}

// coordinator is the coordinator of serve (run's schedule).
func (f *federated) coordinator() *federation.Coordinator {
	return &federation.Coordinator{Strategy: f.coord.Plan.Strategy, Rounds: f.o.Rounds, Fraction: f.o.Fraction,
		Seed: f.o.Seed, EvalEvery: f.o.EvalEvery, Logger: quiet()}
}

// outcome collects the federation's results as serve and the sites write
// them.
func (f *federated) outcome(hist *federation.History) outcome {
	f.t.Helper()
	o := f.o
	o.OutDir = f.t.TempDir()
	res, err := experiment.WriteFederationReports(o, f.coord, hist)
	if err != nil {
		f.t.Fatal(err)
	}
	oc := outcome{sites: map[int]tensor.Named{}, states: map[int]tensor.Named{}, records: res.Records}
	m, ok := res.Summary.Get(f.name)
	if !ok {
		f.t.Fatalf("%s: no summary row", f.name)
	}
	oc.summary = m
	if f.coord.Plan.Global != nil {
		oc.global = f.coord.Plan.Global()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, s := range f.sites {
		if s.Plan.Site != nil {
			p, err := s.SiteParams(i)
			if err != nil {
				f.t.Fatal(err)
			}
			oc.sites[i] = p
		}
		oc.states[i] = newestState(f.t, f.dirs[i])
	}
	return oc
}

// swapProxy is an in-process site that can be replaced (restarted).
type swapProxy struct {
	mu sync.Mutex
	s  *federation.Site
}

func (p *swapProxy) get() *federation.Site { p.mu.Lock(); defer p.mu.Unlock(); return p.s }
func (p *swapProxy) ID() int               { return p.get().ID() }
func (p *swapProxy) NumExamples() int      { return p.get().NumExamples() }
func (p *swapProxy) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	return p.get().Fit(ctx, ins)
}
func (p *swapProxy) Evaluate(ctx context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	return p.get().Evaluate(ctx, ins)
}

// TestResumeSite: one site of the federation (serve + sites, in process)
// restarted after round 1, and after round 2 — its process state lost, its
// client prepared afresh and continuing from its state folder — ends
// bit-identical to the uninterrupted simulation; every upload holds
// exactly the declared shared tensors and nothing private.
func TestResumeSite(t *testing.T) {
	skipPureGo(t)
	forEach(t, func(t *testing.T, name string) {
		r := ref(t, name)
		for _, after := range []int{0, 1} {
			f := newFederated(t, r.o, name)
			co := f.coordinator()
			proxies := make([]*swapProxy, numClients)
			for i := range numClients {
				proxies[i] = &swapProxy{s: federation.NewSite(&watched{Client: f.sites[i].Client(i), priv: f.priv}, f.dirs[i])}
				co.Proxies = append(co.Proxies, proxies[i])
			}
			const victim = 1
			co.OnRound = func(rep federation.RoundReport) error {
				if rep.Round == after {
					s := federation.NewSite(f.site(victim), f.dirs[victim])
					proxies[victim].mu.Lock()
					proxies[victim].s = s
					proxies[victim].mu.Unlock()
				}
				return nil
			}
			hist, err := co.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			compare(t, fmt.Sprintf("site %d restarted after round %d", victim, after+1), r.oc, f.outcome(hist))
			f.priv.report(t)
		}
	})
}

// TestNetworkEqualsSimulation: the coordinator and three sites over real
// gRPC with mTLS on loopback (federation.fraction 0.5: one site idle in
// rounds 2 and 3), one site killed while it trains round 2 and restarted
// from its state folder, give the simulation's results bit for bit; every
// upload holds exactly the declared shared tensors and nothing private.
func TestNetworkEqualsSimulation(t *testing.T) {
	skipPureGo(t)
	forEach(t, func(t *testing.T, name string) {
		r := ref(t, name)
		idle := false
		f := newFederated(t, r.o, name)
		dir := t.TempDir()
		var names []string
		for i := range numClients {
			names = append(names, fmt.Sprintf("site-%d", i))
		}
		if err := certs.Init(dir, names, nil); err != nil {
			t.Fatal(err)
		}
		spec, err := f.coord.Spec()
		if err != nil {
			t.Fatal(err)
		}
		co := f.coordinator()
		co.Parallel = numClients
		selected := map[int][]int{}
		co.OnRound = func(rep federation.RoundReport) error {
			selected[rep.Round] = rep.Selected
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		ready := make(chan string, 1)
		var hist *federation.History
		var cerr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			hist, cerr = transport.RunCoordinator(ctx, transport.CoordinatorConfig{Addr: "127.0.0.1:0", CertsDir: dir,
				StatePath: filepath.Join(dir, "coord.db"), Spec: transport.Spec(spec), PollWait: 500 * time.Millisecond,
				Heartbeat: 200 * time.Millisecond, Linger: time.Second, Logger: quiet(),
				Ready: func(g, _ string, _ *transport.Server) { ready <- g }}, co)
		}()
		var addr string
		select {
		case addr = <-ready:
		case <-done:
			t.Fatalf("coordinator: %v", cerr)
		}
		// the first site to start training round 1 dies then, and is
		// started again
		kill := &killer{round: 1}
		var wg sync.WaitGroup
		siteErrs := make(chan error, 2*numClients)
		var runSite func(i int, c *watched)
		runSite = func(i int, c *watched) {
			sctx, scancel := context.WithCancel(ctx)
			c.kill = scancel
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer scancel()
				err := transport.RunSite(sctx, transport.SiteConfig{Addr: addr, CertsDir: dir, Name: names[i],
					StateDir: f.dirs[i], MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Logger: quiet()}, c)
				if sctx.Err() != nil && ctx.Err() == nil && err != nil {
					// killed: start it again, prepared from scratch
					runSite(i, f.site(i))
					return
				}
				siteErrs <- err
			}()
		}
		for i := range numClients {
			runSite(i, &watched{Client: f.sites[i].Client(i), priv: f.priv, killer: kill})
		}
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("the federation did not finish in 3 minutes")
		}
		if cerr != nil {
			cancel() // the sites would wait for a coordinator that is gone
		}
		wg.Wait()
		close(siteErrs)
		for err := range siteErrs {
			if err != nil {
				t.Errorf("site: %v", err)
			}
		}
		if cerr != nil {
			t.Fatal(cerr)
		}
		for rd, sel := range selected {
			if rd > 0 && len(sel) < numClients {
				idle = true
			}
		}
		if !idle {
			t.Error("no site was idle in any round: fraction < 1 is not covered")
		}
		if len(kill.killed) != 1 {
			t.Errorf("%d sites were killed, want one", len(kill.killed))
		}
		compare(t, "serve + sites over gRPC, a site killed and restarted", r.oc, f.outcome(hist))
		f.priv.report(t)
	})
}
