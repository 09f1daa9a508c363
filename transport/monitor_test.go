package transport

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/coordstore"
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
	if count["register"] < 2 || count["round_start"] != 3 || count["round_end"] != 3 || count["coordinator_start"] != 1 {
		t.Fatalf("event log counts %v, want ≥2 register, 3 round_start, 3 round_end, 1 coordinator_start", count)
	}
	checkPayloadBytes(t, f)
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

// counter reads the value of the series name (without labels) from the
// server's registry.
func counter(t *testing.T, srv *Server, name string) float64 {
	t.Helper()
	mfs, err := srv.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// checkPayloadBytes: /metrics' pfedmma_bytes_in_total and _out_total are
// the payload bytes the round reports (hence summary.json and the
// dashboard) count; the wire's encoding overhead is its own series, larger.
func checkPayloadBytes(t *testing.T, f *fed) {
	t.Helper()
	var up, down int64
	for _, r := range f.hist.Rounds {
		up += r.BytesUp
		down += r.BytesDown
	}
	var dashUp int64
	for _, r := range f.srv.Status().History {
		dashUp += r.BytesUp
	}
	in, out := counter(t, f.srv, "pfedmma_bytes_in_total"), counter(t, f.srv, "pfedmma_bytes_out_total")
	if up == 0 || in != float64(up) || out != float64(down) || dashUp != up {
		t.Errorf("payload bytes: /metrics %v in, %v out; the rounds %d up, %d down; the dashboard %d up", in, out, up, down, dashUp)
	}
	if wire := counter(t, f.srv, "pfedmma_wire_bytes_in_total"); wire <= in {
		t.Errorf("pfedmma_wire_bytes_in_total %v, want the payload %v plus the encoding's headers", wire, in)
	}
}

// TestRestartOnDashboard: a coordinator restarted on a state folder logs
// the restart, keeps the earlier events (the first registration), and
// shows the rounds done and the job before it resumes — registrations
// then carry the round it resumes at, not round 0.
func TestRestartOnDashboard(t *testing.T) {
	state := filepath.Join(t.TempDir(), "coord.db")
	f := startFed(t, fedOpts{n: 2, rounds: 2, fraction: 1, seed: 1, state: state})
	f.wait(t)
	if f.err != nil {
		t.Fatal(f.err)
	}
	store, err := coordstore.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	events, err := OpenEvents(state)
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	srv, err := NewServer(ServerConfig{Sites: f.sites, Insecure: true, Spec: toy.Spec(), Store: store, Events: events, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	job := dashboard.Job{Method: "toy", Preset: "p", Protocol: "fewshot"}
	srv.Prime(job, 5)
	st := srv.Status()
	if st.Round != 2 || st.Rounds != 5 || len(st.History) != 2 || st.Job != job || st.Phase != "waiting" {
		t.Errorf("restarted: round %d of %d, %d rounds shown, job %+v, phase %s; want 2 of 5, 2, %+v, waiting", st.Round, st.Rounds, len(st.History), st.Job, st.Phase, job)
	}
	ev := st.Events
	if len(ev) < 8 || ev[0].Kind != "coordinator_start" || !slices.ContainsFunc(ev[:4], func(e dashboard.Event) bool { return e.Kind == "register" }) {
		t.Fatalf("restarted: the log starts %+v; want the first run's start and registrations", ev[:min(len(ev), 4)])
	}
	last := ev[len(ev)-1]
	if last.Kind != "coordinator_restart" || last.Round != 2 || !strings.Contains(last.Message, "2 of 5 rounds done, resuming at round 2") {
		t.Errorf("the restart is logged as %+v", last)
	}
}
