package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/transport/internal/toy"
)

// operatorClient is an HTTPS client with operator "ops"'s certificate
// (made by startFed).
func operatorClient(t *testing.T, dir string) *http.Client {
	t.Helper()
	cfg, err := certs.OperatorClientTLS(dir, "ops")
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
}

func TestHTTPListenAddr(t *testing.T) {
	for in, want := range map[string]string{"7444": "127.0.0.1:7444", ":7444": "127.0.0.1:7444",
		"0.0.0.0:7444": "0.0.0.0:7444", "10.1.2.3:80": "10.1.2.3:80", "[::1]:7444": "[::1]:7444"} {
		got, err := HTTPListenAddr(in)
		if err != nil || got != want {
			t.Errorf("HTTPListenAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := HTTPListenAddr("host:"); err == nil || !strings.Contains(err.Error(), "--http") {
		t.Errorf("a missing port: %v", err)
	}
}

// TestDashboardDoors: the dashboard, /api/status and /metrics answer 401
// without an operator certificate or the bearer token (even with a site's
// certificate), and 200 with either; /healthz stays open.
func TestDashboardDoors(t *testing.T) {
	dir := t.TempDir()
	sites := []string{"site-0", "site-1"}
	if err := certs.Init(dir, sites, nil); err != nil {
		t.Fatal(err)
	}
	if err := certs.AddOperator(dir, "ops"); err != nil {
		t.Fatal(err)
	}
	const token = "0123456789abcdef-secret"
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go RunCoordinator(t.Context(), CoordinatorConfig{Addr: "127.0.0.1:0", HTTPAddr: "0", HTTPTokenFile: tokFile, CertsDir: dir,
		StatePath: filepath.Join(t.TempDir(), "coord.db"), Spec: toy.Spec(), Logger: quietLogger(),
		Ready: func(_, h string, _ *Server) { ready <- h }}, nil)
	var addr string
	select {
	case addr = <-ready:
	case <-time.After(20 * time.Second):
		t.Fatal("coordinator did not listen")
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("a bare port listens on %s, want loopback", addr)
	}
	pool, err := certs.CAPool(dir)
	if err != nil {
		t.Fatal(err)
	}
	siteTLS, err := certs.SiteTLS(dir, "site-0", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	siteTLS.ServerName = ""
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	plain := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}}, Timeout: 5 * time.Second,
		CheckRedirect: noRedirect}
	site := &http.Client{Transport: &http.Transport{TLSClientConfig: siteTLS}, Timeout: 5 * time.Second, CheckRedirect: noRedirect}
	ops := operatorClient(t, dir)
	get := func(cli *http.Client, path, bearer string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", "https://"+addr+path, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := cli.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/", "/api/status", "/api/log", "/metrics"} {
		// the page sends a browser to the token login; the rest is 401
		refused := http.StatusUnauthorized
		if path == "/" {
			refused = http.StatusSeeOther
		}
		if c := get(plain, path, ""); c != refused {
			t.Errorf("%s without certificate or token: %d, want %d", path, c, refused)
		}
		if c := get(plain, path, "wrong-token-wrong-token"); c != refused {
			t.Errorf("%s with a wrong token: %d, want %d", path, c, refused)
		}
		if c := get(site, path, ""); c != refused {
			t.Errorf("%s with a site's certificate: %d, want %d", path, c, refused)
		}
		if c := get(ops, path, ""); c != http.StatusOK {
			t.Errorf("%s with the operator certificate: %d, want 200", path, c)
		}
		if c := get(plain, path, token); c != http.StatusOK {
			t.Errorf("%s with the token: %d, want 200", path, c)
		}
	}
	if c := get(plain, "/healthz", ""); c != http.StatusOK {
		t.Errorf("/healthz: %d, want 200", c)
	}
	// a browser without a certificate signs in with the token: a Secure
	// session cookie (over TLS) then opens the API
	resp, err := plain.PostForm("https://"+addr+"/login", url.Values{"token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 || !resp.Cookies()[0].Secure {
		t.Fatalf("token login over TLS: %s, cookies %v; want 303 and one Secure session cookie", resp.Status, resp.Cookies())
	}
	req, _ := http.NewRequest("GET", "https://"+addr+"/api/status", nil)
	req.AddCookie(resp.Cookies()[0])
	if resp, err = plain.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/status with the session: %s", resp.Status)
	}
}

// inflating uploads more examples than its site registered.
type inflating struct{ federation.Client }

func (c inflating) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	res, err := c.Client.Fit(ctx, ins)
	res.NumExamples = 1 << 30
	return res, err
}

// TestUploadExampleCountChecked: an upload whose example count differs from
// the count declared at registration is refused, naming both, and never
// weighs in the aggregate.
func TestUploadExampleCountChecked(t *testing.T) {
	f := startFed(t, fedOpts{n: 3, rounds: 1, fraction: 1, seed: 1, timeout: 10 * time.Second,
		wrap: func(i int, c federation.Client) federation.Client {
			if i == 1 {
				return inflating{c}
			}
			return c
		}})
	f.wait(t)
	if f.err != nil {
		t.Fatal(f.err)
	}
	fail := f.hist.Rounds[0].Failures[1]
	if !strings.Contains(fail, "1073741824 examples") || !strings.Contains(fail, "registered 8") {
		t.Fatalf("failure of site 1 = %q, want a refusal naming the claimed and the registered count", fail)
	}
	if len(f.hist.Rounds[0].Fit) != 2 {
		t.Fatalf("fit results %v", f.hist.Rounds[0].Fit)
	}
	if n := f.srv.Status().Sites[1].Refused[ReasonExamples]; n != 1 {
		t.Fatalf("site-1's refusals %v", f.srv.Status().Sites[1].Refused)
	}
}

// TestRevokedConnectedSiteCutOff: `certs revoke` of a site that is
// connected and training takes effect within seconds: its task fails, the
// rounds go on without it and nothing of it is aggregated afterwards.
func TestRevokedConnectedSiteCutOff(t *testing.T) {
	const rounds = 8
	siteErrs := make(chan error, 3)
	f := startFed(t, fedOpts{n: 3, rounds: rounds, fraction: 1, seed: 1, timeout: time.Minute, minFit: 2, siteErrs: siteErrs,
		clients: func(i int) *toy.Client {
			c := toy.New(i)
			c.Delay = 400 * time.Millisecond
			return c
		}})
	deadline := time.Now().Add(30 * time.Second)
	for f.srv == nil || len(f.srv.Status().History) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no round completed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := certs.Revoke(f.dir, "site-1"); err != nil {
		t.Fatal(err)
	}
	revokedAt := time.Now()
	f.wait(t)
	if f.err != nil {
		t.Fatal(f.err)
	}
	// once a round is without site-1, every later one is; the round it
	// was cut off in names it failed as revoked, and from the next one it
	// has left the schedule: not asked, not a failure, not absent
	var cut, left bool
	for _, r := range f.hist.Rounds {
		if _, ok := r.Fit[1]; !ok {
			switch {
			case slices.Contains(r.Departed, 1):
				left = true
				if _, failed := r.Failures[1]; failed || slices.Contains(r.Absent, 1) || slices.Contains(r.Selected, 1) {
					t.Errorf("round %d: site-1 left the schedule but is selected %v, failed %q or absent %v", r.Round, r.Selected, r.Failures[1], r.Absent)
				}
			case left:
				t.Errorf("round %d: site-1 back in the schedule (failure %q)", r.Round, r.Failures[1])
			case !strings.Contains(r.Failures[1], "revoked"):
				t.Errorf("round %d: site-1's failure %q does not say it was revoked", r.Round, r.Failures[1])
			}
			cut = true
			continue
		}
		if cut {
			t.Fatalf("round %d aggregated site-1 after it was cut off", r.Round)
		}
	}
	if !slices.Contains(f.hist.Rounds[rounds-1].Departed, 1) {
		t.Fatalf("the last round: departed %v, failures %v; want site-1 gone from the schedule", f.hist.Rounds[rounds-1].Departed, f.hist.Rounds[rounds-1].Failures)
	}
	if !cut {
		t.Fatalf("site-1 was never cut off (revoked %v ago)", time.Since(revokedAt))
	}
	if _, ok := f.hist.Rounds[rounds-1].Fit[1]; ok {
		t.Fatal("the last round aggregated the revoked site")
	}
	// cut off within seconds: at most the rounds of ~3 s after revocation
	// can still hold it (each round lasts ≈ 0.4 s)
	with := 0
	for _, r := range f.hist.Rounds[1:] {
		if _, ok := r.Fit[1]; ok {
			with++
		}
	}
	if with > 5 {
		t.Fatalf("site-1 was aggregated in %d rounds after its revocation", with)
	}
	if st := f.srv.Status(); st.Sites[1].State != "revoked" {
		t.Errorf("site-1's state %q, want revoked", st.Sites[1].State)
	}
	// the revoked site ends with a refusal saying so, in words meant for
	// its operator (not "session made progress: …")
	var refused []error
	for range 3 {
		select {
		case err := <-siteErrs:
			if err != nil {
				refused = append(refused, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a site did not end")
		}
	}
	if len(refused) != 1 || !errors.Is(refused[0], ErrRefused) || !strings.Contains(refused[0].Error(), "revoked") ||
		strings.Contains(refused[0].Error(), "session made progress") {
		t.Fatalf("the sites' errors %v: want one refusal saying the site is revoked, without internal phrases", refused)
	}
}
