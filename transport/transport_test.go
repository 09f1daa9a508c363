package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/compress"
	"github.com/pfedmma/pfedmma/coordstore"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/transport/internal/toy"
)

func quietLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// reference runs the toy federation in process (the ground truth).
func reference(t *testing.T, n, rounds int, fraction float64, seed uint64) (tensor.Named, *federation.History) {
	t.Helper()
	dir := t.TempDir()
	var proxies []federation.ClientProxy
	for i := range n {
		proxies = append(proxies, federation.NewSite(toy.New(i), filepath.Join(dir, fmt.Sprint(i))))
	}
	strat := toy.Strategy()
	c := &federation.Coordinator{Strategy: strat, Proxies: proxies, Rounds: rounds, Fraction: fraction, Seed: seed, Logger: quietLogger()}
	h, err := c.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return strat.Global(), h
}

type fed struct {
	dir      string
	sites    []string
	grpcAddr string
	httpAddr string
	srv      *Server
	strat    interface{ Global() tensor.Named }
	hist     *federation.History
	err      error
	done     chan struct{}
	// cancel stops site i (a dead site: its heartbeats stop).
	cancel []context.CancelFunc
}

type fedOpts struct {
	n, rounds      int
	fraction       float64
	seed           uint64
	insecure       bool
	timeout        time.Duration
	minFit         int
	clients        func(i int) *toy.Client
	state          string
	skipSite       map[int]bool
	siteErrs       chan error
	ctx            context.Context
	pollWait       time.Duration
	spec           Spec
	limits         Limits
	alreadyCertDir string
	// evalGlobal makes the strategy send the global for evaluations;
	// wrap, when set, wraps each site's client.
	evalGlobal bool
	wrap       func(i int, c federation.Client) federation.Client
	// liveness: tolerate failures without a timeout, the registration
	// deadline, the retry period of a round below min-fit, and the
	// coordinator's and each site's settings.
	tolerate        bool
	registerTimeout time.Duration
	retryEvery      time.Duration
	coordSettings   []string
	siteSettings    func(i int) []string
	// compress encodes every message (federation.compress).
	compress compress.Codec
	// secure aggregation (secagg_test.go): on, and a hook called on site
	// i after each of its steps with the site's stop function.
	secure     bool
	secAggHook func(i int, step string, round int, stop context.CancelFunc)
	// an adversarial coordinator (Server.secAggTamper), each site's
	// minimum of participants, and each site's logger (nil: quiet)
	secAggTamper   func(site int, what string, payload []byte) []byte
	secAggMinSites int
	siteLog        func(i int) *slog.Logger
	// the dashboard's token file and how long it stays up after the
	// rounds (monitor_test.go)
	httpTokenFile string
	httpLinger    time.Duration
	// FLiP's client drop rate and personal evaluation (flip_test.go)
	dropRate float64
	personal bool
}

// startFed runs RunCoordinator and one RunSite per site in goroutines over
// loopback.
func startFed(t *testing.T, o fedOpts) *fed {
	t.Helper()
	if o.ctx == nil {
		o.ctx = t.Context()
	}
	f := &fed{dir: o.alreadyCertDir, done: make(chan struct{})}
	for i := range o.n {
		f.sites = append(f.sites, fmt.Sprintf("site-%d", i))
	}
	if f.dir == "" {
		f.dir = t.TempDir()
		if err := certs.Init(f.dir, f.sites, nil); err != nil {
			t.Fatal(err)
		}
		if err := certs.AddOperator(f.dir, "ops"); err != nil {
			t.Fatal(err)
		}
	}
	if o.state == "" {
		o.state = filepath.Join(t.TempDir(), "coord.db")
	}
	if o.pollWait == 0 {
		o.pollWait = time.Second
	}
	if o.spec == nil {
		o.spec = toy.Spec()
	}
	strat := toy.Strategy()
	strat.EvaluateGlobal = o.evalGlobal
	f.strat = strat
	coord := &federation.Coordinator{Strategy: strat, Rounds: o.rounds, Fraction: o.fraction, Seed: o.seed, Parallel: o.n,
		TolerateFailures: o.timeout > 0 || o.tolerate, RetryEvery: o.retryEvery, MinFit: o.minFit, RoundTimeout: o.timeout, Logger: quietLogger(),
		PayloadBytes: o.compress.Bytes, DropRate: o.dropRate, PersonalEval: o.personal}
	if o.secure {
		coord.Secure = simulatedSecure()
	}
	ready := make(chan struct{})
	go func() {
		defer close(f.done)
		f.hist, f.err = RunCoordinator(o.ctx, CoordinatorConfig{Addr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", CertsDir: f.dir,
			Insecure: o.insecure, StatePath: o.state, Spec: o.spec, Limits: o.limits, PollWait: o.pollWait, Heartbeat: 200 * time.Millisecond,
			Logger: quietLogger(), Linger: 3 * time.Second, RegisterTimeout: o.registerTimeout, Settings: o.coordSettings, Compress: o.compress,
			HTTPTokenFile: o.httpTokenFile, HTTPLinger: o.httpLinger,
			Ready: func(g, h string, s *Server) {
				f.grpcAddr, f.httpAddr, f.srv = g, h, s
				s.secAggTamper = o.secAggTamper
				close(ready)
			}}, coord)
	}()
	select {
	case <-ready:
	case <-f.done:
		t.Fatalf("coordinator: %v", f.err)
	}
	f.cancel = make([]context.CancelFunc, o.n)
	for i := range o.n {
		if o.skipSite[i] {
			continue
		}
		sctx, cancel := context.WithCancel(o.ctx)
		f.cancel[i] = cancel
		c := toy.New(i)
		if o.clients != nil {
			c = o.clients(i)
		}
		var fc federation.Client = c
		if o.wrap != nil {
			fc = o.wrap(i, c)
		}
		var settings []string
		if o.siteSettings != nil {
			settings = o.siteSettings(i)
		}
		var hook func(string, int)
		if o.secAggHook != nil {
			hook = func(step string, round int) { o.secAggHook(i, step, round, cancel) }
		}
		log := quietLogger()
		if o.siteLog != nil {
			log = o.siteLog(i)
		}
		go func() {
			err := RunSite(sctx, SiteConfig{Addr: f.grpcAddr, CertsDir: f.dir, Name: f.sites[i], Insecure: o.insecure, Settings: settings,
				StateDir: filepath.Join(f.dir, "state", f.sites[i]), MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
				Logger: log, SecAggHook: hook, SecAggMinSites: o.secAggMinSites}, fc)
			if o.siteErrs != nil {
				o.siteErrs <- err
			}
		}()
	}
	return f
}

func (f *fed) wait(t *testing.T) {
	t.Helper()
	select {
	case <-f.done:
	case <-time.After(60 * time.Second):
		t.Fatal("federation did not finish in 60 s")
	}
}

func sameNamed(t *testing.T, got, want tensor.Named) {
	t.Helper()
	if len(got) != len(want) || len(want) == 0 {
		t.Fatalf("got tensors %v, want %v", got, want)
	}
	for k, w := range want {
		g := got[k]
		if g == nil || !slices.Equal(g.Shape, w.Shape) || !slices.Equal(g.Data, w.Data) {
			t.Fatalf("tensor %q: got %v, want %v (bit-identical)", k, g, w)
		}
	}
}

func TestNetworkedRunMatchesInProcess(t *testing.T) {
	const n, rounds, seed = 3, 4, 7
	want, wantHist := reference(t, n, rounds, 0.7, seed)
	f := startFed(t, fedOpts{n: n, rounds: rounds, fraction: 0.7, seed: seed})
	f.wait(t)
	if f.err != nil {
		t.Fatal(f.err)
	}
	sameNamed(t, f.strat.Global(), want)
	if len(f.hist.Rounds) != rounds {
		t.Fatalf("%d rounds, want %d", len(f.hist.Rounds), rounds)
	}
	for r := range rounds {
		g, w := f.hist.Rounds[r], wantHist.Rounds[r]
		if !slices.Equal(g.Selected, w.Selected) || fmt.Sprint(g.Eval) != fmt.Sprint(w.Eval) || fmt.Sprint(g.Fit) != fmt.Sprint(w.Fit) {
			t.Fatalf("round %d: got %+v, want %+v", r, g, w)
		}
	}
}

// TestDashboardEndpoints checks /healthz, /metrics and /api/status over
// TLS while the coordinator lingers.
// evalRecorder keeps the tensors of each evaluation instruction a client
// receives, by round.
type evalRecorder struct {
	federation.Client
	mu  *sync.Mutex
	got map[int]tensor.Named
}

func (e evalRecorder) Evaluate(ctx context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	e.mu.Lock()
	e.got[ins.Round] = ins.Params.Clone()
	e.mu.Unlock()
	return e.Client.Evaluate(ctx, ins)
}

// TestEvaluationCarriesTensors (issue 17): the strategy's evaluation
// instructions (ConfigureEvaluate: here the new global, to every site,
// selected in the round or not) reach the sites over gRPC bit for bit, as
// in simulation.
func TestEvaluationCarriesTensors(t *testing.T) {
	const n, rounds, seed = 3, 3, 7
	var mu sync.Mutex
	got := make([]map[int]tensor.Named, n)
	globals := map[int]tensor.Named{}
	f := startFed(t, fedOpts{n: n, rounds: rounds, fraction: 0.4, seed: seed, evalGlobal: true,
		wrap: func(i int, c federation.Client) federation.Client {
			got[i] = map[int]tensor.Named{}
			return evalRecorder{Client: c, mu: &mu, got: got[i]}
		}})
	f.wait(t)
	if f.err != nil {
		t.Fatal(f.err)
	}
	// the in-process reference: the global after each round
	dir := t.TempDir()
	var proxies []federation.ClientProxy
	for i := range n {
		proxies = append(proxies, federation.NewSite(toy.New(i), filepath.Join(dir, fmt.Sprint(i))))
	}
	strat := toy.Strategy()
	strat.EvaluateGlobal = true
	c := &federation.Coordinator{Strategy: strat, Proxies: proxies, Rounds: rounds, Fraction: 0.4, Seed: seed, Logger: quietLogger(),
		OnRound: func(r federation.RoundReport) error { globals[r.Round] = strat.Global(); return nil }}
	if _, err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	idle := false
	for r := range rounds {
		if len(f.hist.Rounds[r].Selected) < n {
			idle = true
		}
		for i := range n {
			mu.Lock()
			g := got[i][r]
			mu.Unlock()
			sameNamed(t, g, globals[r])
		}
	}
	if !idle {
		t.Error("every site was selected in every round: the test does not cover idle sites")
	}
}

func TestDashboardEndpoints(t *testing.T) {
	f := startFed(t, fedOpts{n: 2, rounds: 4, fraction: 1, seed: 1, clients: func(i int) *toy.Client {
		c := toy.New(i)
		c.Delay = 300 * time.Millisecond
		return c
	}})
	cli := operatorClient(t, f.dir)
	get := func(path string) string {
		t.Helper()
		resp, err := cli.Get("https://" + f.httpAddr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		return string(b)
	}
	if got := get("/healthz"); strings.TrimSpace(got) != "ok" {
		t.Fatalf("/healthz = %q", got)
	}
	// clear text is refused on the TLS port
	if resp, err := http.Get("http://" + f.httpAddr + "/healthz"); err == nil && resp.StatusCode == 200 {
		t.Fatal("dashboard answered in clear text")
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(get("/api/status"), `"eval_mean"`) {
		if time.Now().After(deadline) {
			t.Fatal("status never shows an evaluation: " + get("/api/status"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	st := get("/api/status")
	for _, want := range []string{`"name":"site-0"`, `"name":"site-1"`, `"eval_mean"`} {
		if !strings.Contains(st, want) {
			t.Errorf("/api/status lacks %s: %s", want, st)
		}
	}
	m := get("/metrics")
	for _, want := range []string{"pfedmma_rounds_total ", "pfedmma_bytes_in_total", "pfedmma_bytes_out_total", "pfedmma_round_seconds_bucket", "pfedmma_round_participants 2"} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !strings.Contains(get("/"), "<svg") {
		t.Error("page has no SVG")
	}
	f.wait(t)
	if f.err != nil {
		t.Fatal(f.err)
	}
}

// TestDeadlineClosesRound: a site slower than the round deadline becomes a
// failure, the round closes with the others, its late uploads are refused
// and recorded, and nothing of it reaches the aggregate.
func TestDeadlineClosesRound(t *testing.T) {
	state := filepath.Join(t.TempDir(), "coord.db")
	f := startFed(t, fedOpts{n: 3, rounds: 2, fraction: 1, seed: 3, timeout: 600 * time.Millisecond, minFit: 2, state: state,
		clients: func(i int) *toy.Client {
			c := toy.New(i)
			if i == 2 {
				c.Delay = 900 * time.Millisecond
			}
			return c
		}})
	f.wait(t)
	if f.err != nil {
		t.Fatal(f.err)
	}
	for _, r := range f.hist.Rounds {
		if _, ok := r.Failures[2]; !ok || len(r.Failures) != 1 || len(r.Fit) != 2 {
			t.Fatalf("round %d: failures %v, fit %v; want site 2 failed only", r.Round, r.Failures, r.Fit)
		}
	}
	// the aggregate is the mean of sites 0 and 1 only: compare with an
	// in-process run in which site 2 always fails
	dir := t.TempDir()
	proxies := []federation.ClientProxy{federation.NewSite(toy.New(0), filepath.Join(dir, "0")),
		federation.NewSite(toy.New(1), filepath.Join(dir, "1")), failing{federation.NewSite(toy.New(2), "")}}
	ref := toy.Strategy()
	c := &federation.Coordinator{Strategy: ref, Proxies: proxies, Rounds: 2, Fraction: 1, Seed: 3, TolerateFailures: true, MinFit: 2, Logger: quietLogger()}
	if _, err := c.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	sameNamed(t, f.strat.Global(), ref.Global())
	time.Sleep(500 * time.Millisecond) // let the last late upload arrive
	st, err := coordstore.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	reasons, err := st.Refusals()
	if err != nil {
		t.Fatal(err)
	}
	if len(reasons) == 0 || !strings.HasPrefix(reasons[0], ReasonRoundClosed) {
		t.Fatalf("refusals %q, want late uploads refused as %s", reasons, ReasonRoundClosed)
	}
}

// TestPoisonedUploadRefused: a NaN in an upload is refused with a reason,
// counted, and the round aggregates the others.
func TestPoisonedUploadRefused(t *testing.T) {
	f := startFed(t, fedOpts{n: 3, rounds: 1, fraction: 1, seed: 3, timeout: 10 * time.Second, minFit: 2, insecure: true,
		clients: func(i int) *toy.Client {
			c := toy.New(i)
			c.Poison = i == 1
			return c
		}})
	f.wait(t)
	if f.err != nil {
		t.Fatal(f.err)
	}
	fail := f.hist.Rounds[0].Failures[1]
	if !strings.Contains(fail, "refused") || !strings.Contains(fail, "NaN") {
		t.Fatalf("failure of site 1 = %q, want a refusal naming the NaN", fail)
	}
	if len(f.hist.Rounds[0].Fit) != 2 {
		t.Fatalf("fit results %v", f.hist.Rounds[0].Fit)
	}
	for _, v := range f.strat.Global()["shared.w"].Data {
		if v != v {
			t.Fatal("NaN reached the aggregate")
		}
	}
}

func TestVersionRefused(t *testing.T) {
	f := startFed(t, fedOpts{n: 1, rounds: 1, fraction: 1, seed: 1, skipSite: map[int]bool{0: true}})
	tc, err := certs.SiteTLS(f.dir, "site-0", "")
	if err != nil {
		t.Fatal(err)
	}
	r := &SiteRunner{Addr: f.grpcAddr, TLS: tc, Name: "site-0", Site: federation.NewSite(toy.New(0), ""), Version: ProtocolVersion + 1, Logger: quietLogger()}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err = r.Run(ctx)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "protocol version 2 refused") {
		t.Fatalf("Run = %v, want a protocol-version refusal", err)
	}
	// a site claiming another client ID is refused too
	r = &SiteRunner{Addr: f.grpcAddr, TLS: tc, Name: "site-0", Site: federation.NewSite(toy.New(5), ""), Logger: quietLogger()}
	if err := r.Run(ctx); !errors.Is(err, ErrRefused) {
		t.Fatalf("Run with a wrong client ID = %v", err)
	}
	// a certificate from another federation never gets through
	other := t.TempDir()
	if err := certs.Init(other, []string{"site-0"}, nil); err != nil {
		t.Fatal(err)
	}
	foreign, _ := certs.SiteTLS(other, "site-0", "")
	foreign.RootCAs, _ = certs.CAPool(f.dir)
	r = &SiteRunner{Addr: f.grpcAddr, TLS: foreign, Name: "site-0", Site: federation.NewSite(toy.New(0), ""), Logger: quietLogger(),
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	// it ends at once with the cause instead of retrying as unreachable
	if err := r.Run(sctx); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("foreign site: %v, want a refusal naming the certificate", err)
	}
	if f.srv.Status().Sites[0].Registered {
		t.Fatal("a refused site is registered")
	}
}

// failing is a participant whose training always fails.
type failing struct{ federation.ClientProxy }

func (failing) Fit(context.Context, federation.FitIns) (federation.FitRes, error) {
	return federation.FitRes{}, errors.New("always fails")
}

// TestRevokedSiteEnds: a site whose certificate was revoked ends at once
// with the cause instead of retrying as "coordinator unreachable" (the TLS
// alert cannot say why, so the site names the possible causes).
func TestRevokedSiteEnds(t *testing.T) {
	// no site runs: the coordinator waits for site-1 (a revoked site is
	// not waited for) and stays up
	f := startFed(t, fedOpts{n: 2, rounds: 1, fraction: 1, seed: 1, skipSite: map[int]bool{0: true, 1: true}})
	if err := certs.Revoke(f.dir, "site-0"); err != nil {
		t.Fatal(err)
	}
	tc, err := certs.SiteTLS(f.dir, "site-0", "")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * RevocationInterval) // the coordinator re-reads the list
	r := &SiteRunner{Addr: f.grpcAddr, TLS: tc, Name: "site-0", Site: federation.NewSite(toy.New(0), ""), Logger: quietLogger(),
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err = r.Run(ctx)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "certificate rejected") || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked site: %v, want a refusal naming the rejected certificate and revocation", err)
	}
}
