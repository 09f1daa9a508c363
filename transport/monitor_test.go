package transport

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/dashboard"
	"github.com/pfedmma/pfedmma/transport/internal/toy"
)

// TestGaugesAndEventLog: /metrics tells how many sites are connected (and
// when each was last seen) without anyone loading /api/status, and the
// event log beside the state database records registrations and each
// round's start and end.
func TestGaugesAndEventLog(t *testing.T) {
	state := filepath.Join(t.TempDir(), "coord.db")
	f := startFed(t, fedOpts{n: 2, rounds: 3, fraction: 1, seed: 1, state: state, clients: func(i int) *toy.Client {
		c := toy.New(i)
		c.Delay = 500 * time.Millisecond
		return c
	}})
	cli := operatorClient(t, f.dir)
	t0 := time.Now()
	metrics := func() string {
		resp, err := cli.Get("https://" + f.httpAddr + "/metrics")
		if err != nil {
			select {
			case <-f.done:
				t.Fatalf("GET /metrics after %v: %v (the coordinator ended: %v)", time.Since(t0), err, f.err)
			default:
			}
			t.Fatalf("GET /metrics: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET /metrics: %s: %s", resp.Status, b)
		}
		return string(b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for m := metrics(); !strings.Contains(m, "pfedmma_sites_connected 2"); m = metrics() {
		if time.Now().After(deadline) {
			t.Fatalf("pfedmma_sites_connected never reached 2:\n%s", grepLines(m, "pfedmma_site"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	m := metrics()
	for _, want := range []string{`pfedmma_site_online{site="site-0"} 1`, `pfedmma_site_online{site="site-1"} 1`,
		`pfedmma_site_last_seen_timestamp_seconds{site="site-1"}`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(m, "pfedmma_site"))
		}
	}
	for m := metrics(); !strings.Contains(m, `pfedmma_site_eval{metric="acc",site="site-0"}`); m = metrics() {
		if time.Now().After(deadline) {
			t.Fatalf("/metrics never shows the sites' latest evaluation:\n%s", grepLines(m, "pfedmma_site_eval"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.wait(t)
	if f.err != nil {
		t.Fatal(f.err)
	}
	fh, err := os.Open(filepath.Join(filepath.Dir(state), EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	count := map[string]int{}
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		var e dashboard.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("event log line %q: %v", sc.Text(), err)
		}
		if e.Time.IsZero() || e.Kind == "" {
			t.Errorf("event without time or kind: %s", sc.Text())
		}
		count[e.Kind]++
	}
	if count["register"] < 2 || count["round_start"] != 3 || count["round_end"] != 3 {
		t.Fatalf("event log counts %v, want ≥2 register, 3 round_start, 3 round_end", count)
	}
	if st := f.srv.Status(); len(st.Events) != len(f.srv.cfg.Events.Recent()) || len(st.Events) < 8 {
		t.Fatalf("status shows %d events", len(st.Events))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
