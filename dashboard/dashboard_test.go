package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pfedmma/pfedmma/federation"
)

// fake is a Source whose rounds the test adds.
type fake struct {
	mu   sync.Mutex
	st   Status
	subs map[chan struct{}]bool
}

func newFake() *fake {
	f := &fake{subs: map[chan struct{}]bool{}}
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

// TestPageInChromium loads the page in headless Chromium: it shows the
// sites and a curve, and the curve grows live when rounds complete. The
// screenshot goes to the test's artifact folder (go test -artifacts).
func TestPageInChromium(t *testing.T) {
	bin := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium not found (the Debian package chromium is installed by make deps)")
		}
		t.Skip("chromium not found: install the Debian package chromium to run this test")
	}
	src := newFake()
	src.addRound()
	src.addRound()
	ts := httptest.NewServer(Handler(src, NewMetrics()))
	defer ts.Close()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(900, 900))
	actx, cancel := chromedp.NewExecAllocator(t.Context(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var rows, points1, points2 int
	var phase string
	if err := chromedp.Run(ctx,
		chromedp.Navigate(ts.URL+"/"),
		chromedp.WaitVisible(`#curve-line`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("#sites tbody tr").length`, &rows),
		chromedp.Evaluate(`document.getElementById("curve-line").getAttribute("points").trim().split(" ").length`, &points1),
		chromedp.Text(`#phase`, &phase, chromedp.ByQuery),
	); err != nil {
		t.Fatal(err)
	}
	if rows != 3 || points1 != 2 || phase != "running" {
		t.Fatalf("page shows %d sites, %d curve points, phase %q; want 3, 2, running", rows, points1, phase)
	}
	src.addRound()
	src.addRound()
	deadline := time.Now().Add(10 * time.Second)
	for points2 != 4 && time.Now().Before(deadline) {
		if err := chromedp.Run(ctx, chromedp.Evaluate(`document.getElementById("curve-line").getAttribute("points").trim().split(" ").length`, &points2)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if points2 != 4 {
		t.Fatalf("curve has %d points after two more rounds, want 4 (live update)", points2)
	}
	var shot []byte
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&shot, 100)); err != nil {
		t.Fatal(err)
	}
	if len(shot) < 1000 {
		t.Fatalf("screenshot of %d bytes", len(shot))
	}
	path := filepath.Join(t.ArtifactDir(), "dashboard.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log("screenshot:", path, fmt.Sprintf("(%d bytes)", len(shot)))
}
