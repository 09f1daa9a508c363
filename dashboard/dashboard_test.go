package dashboard

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/federation"
)

// fake is a Source whose rounds the test adds.
type fake struct {
	mu   sync.Mutex
	st   Status
	log  *EventLog
	subs map[chan struct{}]bool
}

func newFake() *fake {
	f := &fake{subs: map[chan struct{}]bool{}, log: &EventLog{}}
	f.st = Status{Phase: "running", Rounds: 6}
	for i, n := range []string{"site-a", "site-b", "site-c"} {
		f.st.Sites = append(f.st.Sites, SiteStatus{Name: n, ID: i, Registered: true, NumExamples: 10 * (i + 1), State: "idle",
			LastContact: time.Now(), Online: i != 2})
	}
	return f
}

func (f *fake) addRound() {
	f.mu.Lock()
	r := len(f.st.History)
	eval := map[int]federation.Metrics{}
	for i := range 3 {
		eval[i] = federation.Metrics{"acc": 0.5 + 0.05*float64(r) + 0.01*float64(i), "mse": 1 / float64(r+1)}
	}
	f.st.History = append(f.st.History, federation.RoundReport{Round: r, Selected: []int{0, 1, 2}, Eval: eval,
		EvalMean: federation.Metrics{"acc": 0.51 + 0.05*float64(r), "mse": 1 / float64(r+1)}})
	f.st.Round = r + 1
	for ch := range f.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	f.mu.Unlock()
}

func (f *fake) Status() Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.st
	st.Updated = time.Now()
	if st.Events == nil {
		st.Events = f.log.Recent()
	}
	return st
}

func (f *fake) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	f.mu.Lock()
	f.subs[ch] = true
	f.mu.Unlock()
	return ch, func() { f.mu.Lock(); delete(f.subs, ch); f.mu.Unlock() }
}

func TestEndpoints(t *testing.T) {
	src := newFake()
	src.addRound()
	m := NewMetrics()
	m.Refused.WithLabelValues("non_finite").Inc()
	ts := httptest.NewServer(Handler(src, m))
	defer ts.Close()
	get := func(p string) (string, http.Header) {
		resp, err := http.Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s", p, resp.Status)
		}
		return string(b), resp.Header
	}
	if b, _ := get("/healthz"); strings.TrimSpace(b) != "ok" {
		t.Fatalf("/healthz %q", b)
	}
	page, h := get("/")
	if !strings.Contains(h.Get("Content-Type"), "text/html") || strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Fatal("page is not self-contained HTML")
	}
	b, _ := get("/api/status")
	var st Status
	if err := json.Unmarshal([]byte(b), &st); err != nil || len(st.Sites) != 3 || len(st.History) != 1 {
		t.Fatalf("status %s: %v", b, err)
	}
	if b, _ := get("/metrics"); !strings.Contains(b, `pfedmma_refused_updates_total{reason="non_finite"} 1`) {
		t.Fatalf("metrics lack the refusal:\n%s", b)
	}
	// server-sent events: the first event is the status
	resp, err := http.Get(ts.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := io.ReadAtLeast(resp.Body, buf, 20)
	resp.Body.Close()
	if !strings.HasPrefix(string(buf[:n]), "event: status\ndata: {") {
		t.Fatalf("event stream starts %q", buf[:n])
	}
}
