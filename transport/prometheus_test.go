package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// prometheusBin is Debian's Prometheus server (package prometheus).
func prometheusBin(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("prometheus")
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("the prometheus binary is not on PATH (the Debian package prometheus is installed by make deps)")
	}
	t.Skip("the prometheus binary is not on PATH: install the Debian package prometheus (make deps) to run this test")
	return ""
}

// TestPrometheusScrapes: a Prometheus server scrapes the coordinator's
// /metrics over TLS with bearer_token_file, and what it stores is the
// federation's: the rounds, the payload bytes the round reports count
// (pfedmma_bytes_in_total), the wire bytes apart. A job without the token
// is refused (its up is 0).
func TestPrometheusScrapes(t *testing.T) {
	bin := prometheusBin(t)
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte("prometheus-scrape-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	f := startFed(t, fedOpts{n: 2, rounds: 3, fraction: 1, seed: 1, ctx: ctx, httpTokenFile: tokFile, httpLinger: 5 * time.Minute})
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, scrape_timeout: 1s}
scrape_configs:
  - job_name: pfedmma
    scheme: https
    bearer_token_file: %q
    tls_config: {ca_file: %q}
    static_configs: [{targets: [%q]}]
  - job_name: no-token
    scheme: https
    tls_config: {ca_file: %q}
    static_configs: [{targets: [%q]}]
`, tokFile, filepath.Join(f.dir, "ca.crt"), f.httpAddr, filepath.Join(f.dir, "ca.crt"), f.httpAddr)
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	web := freePort(t)
	cmd := exec.CommandContext(ctx, bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+web, "--log.level=warn")
	logf, _ := os.Create(filepath.Join(dir, "prometheus.log"))
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	f.waitPhase(t, "done")
	var up int64
	for _, r := range f.srv.Status().History {
		up += r.BytesUp
	}
	want := map[string]float64{`pfedmma_rounds_total`: 3, `pfedmma_bytes_in_total`: float64(up), `up{job="pfedmma"}`: 1, `up{job="no-token"}`: 0}
	got := map[string]float64{}
	deadline := time.Now().Add(120 * time.Second)
	for q := range want {
		for {
			v, ok := promQuery(web, q)
			got[q] = v
			if ok && v == want[q] {
				break
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
				t.Fatalf("Prometheus has %s = %v (found: %v), want %v; its log:\n%s", q, v, ok, want[q], b)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	if wire, ok := promQuery(web, "pfedmma_wire_bytes_in_total"); !ok || wire <= float64(up) {
		t.Errorf("Prometheus has pfedmma_wire_bytes_in_total %v, want more than the %d payload bytes", wire, up)
	}
}

// waitPhase waits until the dashboard's phase is phase.
func (f *fed) waitPhase(t *testing.T, phase string) {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); f.srv.Status().Phase != phase; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the federation's phase is %q after 90 s, want %q", f.srv.Status().Phase, phase)
		}
	}
}

// promQuery asks Prometheus at addr for the instant value of q.
func promQuery(addr, q string) (float64, bool) {
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if json.Unmarshal(b, &r) != nil || len(r.Data.Result) != 1 {
		return 0, false
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}
