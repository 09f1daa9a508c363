package dashboard

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"maps"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
)

// stateColour is what an operator must see for each site state (the
// page's badge background): working states green, done blue, revoked
// orange, offline red, never registered grey.
var stateColour = map[string][3]int{
	"idle": {0x1a, 0x7f, 0x37}, "training": {0x1a, 0x7f, 0x37}, "evaluating": {0x1a, 0x7f, 0x37},
	"done": {0x09, 0x69, 0xda}, "revoked": {0xbc, 0x4c, 0x00}, "offline": {0xcf, 0x22, 0x2e}, "unregistered": {0x6e, 0x77, 0x81},
}

const testToken = "0123456789abcdef-dashboard-token"

// sixSites is site-a … site-f, one per state; site-d never registered.
var sixSites = []struct{ name, state string }{
	{"site-a", "idle"}, {"site-b", "training"}, {"site-c", "revoked"}, {"site-d", "unregistered"}, {"site-e", "offline"}, {"site-f", "done"},
}

// siteEval is site id's evaluation after round r: accuracies in percent
// that wander like a real run's (82.2689 and the like).
func siteEval(id, r int) federation.Metrics {
	x := float64(r)
	return eval.BaseToNovel(70+0.05*x+3.1*float64(id)+math.Sin(x/7), 60+0.04*x+2.3*float64(id), 50+0.03*x+4.7*float64(id)+math.Cos(x/5))
}

// longRun is a federation of sixSites 200 rounds into 250: site-c was
// revoked at round 118 and missed every round since; its events go
// through an EventLog, the first registration first.
func longRun(t *testing.T) (*fake, int) {
	t.Helper()
	added := 0
	f := &fake{subs: map[chan struct{}]bool{}, log: &EventLog{}}
	f.st = Status{Phase: "running", Rounds: 250, Round: 200, Fingerprint: "fp-77aa",
		Job: Job{Method: "pfedmma", Preset: "world-deploy", Protocol: "base2novel", Dataset: "world"}}
	t0 := time.Now().Add(-time.Hour)
	add := func(e Event) {
		t0 = t0.Add(time.Second)
		e.Time = t0
		added++
		if err := f.log.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range sixSites {
		reg := s.state != "unregistered"
		f.st.Sites = append(f.st.Sites, SiteStatus{Name: s.name, ID: i, Registered: reg, NumExamples: 10 * (i + 1), State: s.state,
			LastContact: time.Now(), Online: reg && s.state != "offline" && s.state != "revoked"})
		if reg {
			add(Event{Round: 0, Site: s.name, Kind: "register", Message: fmt.Sprintf("client %d, %d examples", i, 10*(i+1))})
		}
	}
	for r := range 200 {
		add(Event{Round: r, Kind: "round_start", Message: fmt.Sprintf("round %d started", r)})
		rep := federation.RoundReport{Round: r, Eval: map[int]federation.Metrics{}, Fit: map[int]federation.Metrics{}}
		for i, s := range sixSites {
			if s.state == "unregistered" {
				continue
			}
			if s.state == "revoked" && r >= 118 {
				rep.Absent = append(rep.Absent, i)
				rep.Selected = append(rep.Selected, i)
				continue
			}
			rep.Selected = append(rep.Selected, i)
			rep.Participants = append(rep.Participants, i)
			rep.Eval[i] = siteEval(i, r)
			rep.Fit[i] = federation.Metrics{"loss": 2e-3*math.Exp(-float64(r)/60) + 7.615e-4 + 1e-5*float64(i)}
		}
		rep.EvalMean = eval.ClientMean(mapValues(rep.Eval)...)
		rep.FitMean = eval.MeanOf(mapValues(rep.Fit)...)
		rep.BytesUp, rep.BytesDown = 1088*int64(len(rep.Participants)), 2176*int64(len(rep.Participants))
		rep.Seconds = 1.25
		if r == 118 {
			add(Event{Round: r, Site: "site-c", Kind: "revoked", Message: "certificate revoked; 1 pending tasks failed"})
		}
		if r == 150 {
			add(Event{Round: r, Kind: "coordinator_restart", Message: "coordinator restarted: 150 of 250 rounds done, resuming at round 150"})
		}
		add(Event{Round: r, Kind: "round_end", Message: fmt.Sprintf("round %d done", r)})
		f.st.History = append(f.st.History, rep)
	}
	return f, added
}

func mapValues(m map[int]federation.Metrics) []eval.Metrics {
	var out []eval.Metrics
	for _, id := range slices.Sorted(maps.Keys(m)) {
		out = append(out, eval.Metrics(m[id]))
	}
	return out
}

// browser starts headless Chromium (a fresh profile) for the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin := chromiumBin(t)
	// The profile is removed after Chromium: its helper processes may
	// still write there for a moment after the browser is cancelled,
	// which t.TempDir's cleanup reports as a failure.
	profile, err := os.MkdirTemp("", "pfedmma-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for range 20 {
			if os.RemoveAll(profile) == nil {
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
	})
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.UserDataDir(profile), chromedp.WindowSize(1280, 1000))
	actx, cancel := chromedp.NewExecAllocator(t.Context(), opts...)
	t.Cleanup(cancel)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	ctx, cancel = context.WithTimeout(ctx, 120*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// pageView is what the page shows, read from its DOM.
type pageView struct {
	Path, Phase, Progress                 string
	Method, Preset, Protocol, Dataset     string
	Rounds                                string
	Sites                                 [][]string
	Badges                                []rect
	PhaseBadge                            rect
	YTicks, LossTicks, XTicks, SiteTitles []string
	FinalHead, FinalMean                  []string
	FinalOver, Absences, RoundsPage       string
	RoundRows                             [][]string
	EventRows                             [][]string
	EventPage                             string
}

type rect struct{ X, Y, W, H float64 }

const readPage = `(() => {
  const txt = sel => [...document.querySelectorAll(sel)].map(e => e.textContent.trim());
  const rows = sel => [...document.querySelectorAll(sel)].map(tr => [...tr.cells].map(c => c.textContent.trim()));
  const box = e => { const b = e.getBoundingClientRect(); return {X: b.left + scrollX, Y: b.top + scrollY, W: b.width, H: b.height}; };
  const t = id => document.getElementById(id).textContent.trim();
  return {
    Path: location.pathname, Phase: t("phase"), Progress: t("progress"),
    Method: t("job-method"), Preset: t("job-preset"), Protocol: t("job-protocol"), Dataset: t("job-dataset"), Rounds: t("job-rounds"),
    Sites: rows("#sites tbody tr"), Badges: [...document.querySelectorAll("#sites tbody .badge")].map(box), PhaseBadge: box(document.getElementById("phase")),
    YTicks: txt("#curve .ytick"), LossTicks: txt("#loss .ytick"), XTicks: txt("#curve .xtick"), SiteTitles: txt("#curve .site-line title"),
    FinalHead: txt("#final thead th"), FinalMean: txt("#final tr.mean th"), FinalOver: t("final-over"),
    Absences: txt("#absences li").join("; "), RoundsPage: t("rounds-page"), RoundRows: rows("#rounds-table tbody tr"),
    EventRows: rows("#events tbody tr"), EventPage: t("ev-page"),
  };
})()`

func (v *pageView) read(ctx context.Context) error {
	return chromedp.Run(ctx, chromedp.Evaluate(readPage, v))
}

// TestDashboardInChromium signs in with the token in headless Chromium
// and reads a 200-round federation's page as an operator would: each
// state's colour (pixels of a screenshot), the job's identity, the
// absent site named with its rounds as a range, the means (HM of the
// means, said to be over 4 of 6 sites), readable tick labels, curves
// titled by site name, paged rounds, and the event log from its first
// registration on, filtered.
func TestDashboardInChromium(t *testing.T) {
	ctx := browser(t)
	src, added := longRun(t)
	ts := httptest.NewServer(Protect(Handler(src, NewMetrics()), testToken, false, nil))
	defer ts.Close()
	if err := chromedp.Run(ctx,
		chromedp.Navigate(ts.URL+"/"),
		chromedp.WaitVisible(`#token`, chromedp.ByID),
		chromedp.SendKeys(`#token`, testToken, chromedp.ByID),
		chromedp.Click(`#signin`, chromedp.ByID),
		chromedp.WaitVisible(`#curve-line`, chromedp.ByID),
		chromedp.WaitVisible(`#events tbody tr`, chromedp.ByQuery),
	); err != nil {
		t.Fatalf("token login in Chromium: %v", err)
	}
	var v pageView
	if err := v.read(ctx); err != nil {
		t.Fatal(err)
	}
	shot := screenshot(t, ctx, "dashboard.png")
	checkIdentity(t, v)
	checkColours(t, v, shot)
	checkNumbers(t, v, src)
	checkTicks(t, v)
	checkEventLog(t, ctx, added)
	// the rounds table's next page holds rounds 179 down to 160
	if err := chromedp.Run(ctx, chromedp.Click(`#rounds-next`, chromedp.ByID)); err != nil {
		t.Fatal(err)
	}
	if err := v.read(ctx); err != nil {
		t.Fatal(err)
	}
	if len(v.RoundRows) != 20 || v.RoundRows[0][0] != "179" || v.RoundRows[19][0] != "160" || !strings.HasPrefix(v.RoundsPage, "page 2 of 10") {
		t.Errorf("rounds page 2: %q, rows %d first %v", v.RoundsPage, len(v.RoundRows), v.RoundRows[0])
	}
	// the page follows the run live
	src.addRound()
	for deadline := time.Now().Add(15 * time.Second); v.Progress != "201 of 250 rounds done"; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after another round the page still says %q", v.Progress)
		}
		if err := v.read(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func checkIdentity(t *testing.T, v pageView) {
	t.Helper()
	got := []string{v.Path, v.Method, v.Preset, v.Protocol, v.Dataset, v.Rounds, v.Phase, v.Progress}
	want := []string{"/", "pfedmma", "world-deploy", "base2novel", "world", "250", "running", "200 of 250 rounds done"}
	if !slices.Equal(got, want) {
		t.Errorf("page shows path, job and progress %q, want %q", got, want)
	}
}

// checkColours: every site's state badge has its state's colour in the
// screenshot (sampled inside the badge's padding), the phase too.
func checkColours(t *testing.T, v pageView, shot []byte) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if len(v.Sites) != len(sixSites) || len(v.Badges) != len(sixSites) {
		t.Fatalf("page lists %d sites with %d badges, want %d", len(v.Sites), len(v.Badges), len(sixSites))
	}
	sample := func(b rect) [3]int {
		r, g, bl, _ := img.At(int(b.X+3), int(b.Y+b.H/2)).RGBA()
		return [3]int{int(r >> 8), int(g >> 8), int(bl >> 8)}
	}
	near := func(a, b [3]int) bool {
		for i := range a {
			if d := a[i] - b[i]; d > 10 || d < -10 {
				return false
			}
		}
		return true
	}
	for i, s := range sixSites {
		if v.Sites[i][0] != s.name || v.Sites[i][2] != s.state {
			t.Errorf("site row %d: %q, want %s %s", i, v.Sites[i], s.name, s.state)
		}
		if got, want := sample(v.Badges[i]), stateColour[s.state]; !near(got, want) {
			t.Errorf("%s (%s) badge is rgb%v in the screenshot, want rgb%v", s.name, s.state, got, want)
		}
	}
	if got := sample(v.PhaseBadge); !near(got, stateColour["idle"]) {
		t.Errorf("phase 'running' badge is rgb%v, want green rgb%v", got, stateColour["idle"])
	}
}

// checkNumbers: the latest round's mean row is the HM of the means over
// the four sites evaluated, said to be over them; site-c's absence is one
// range; the rounds table's payload bytes.
func checkNumbers(t *testing.T, v pageView, src *fake) {
	t.Helper()
	last := src.st.History[199]
	mean := eval.ClientMean(mapValues(last.Eval)...)
	if math.Abs(mean["hm"]-eval.MeanOf(mapValues(last.Eval)...)["hm"]) < 0.01 {
		t.Fatal("test data does not tell the HM of the means from the mean of the HMs")
	}
	wantHead := []string{"site (round 199)", "base", "hm", "local", "novel"}
	wantMean := []string{"mean", fmt.Sprintf("%.2f", mean["base"]), fmt.Sprintf("%.2f", mean["hm"]), fmt.Sprintf("%.2f", mean["local"]), fmt.Sprintf("%.2f", mean["novel"])}
	if !slices.Equal(v.FinalHead, wantHead) || !slices.Equal(v.FinalMean, wantMean) {
		t.Errorf("latest evaluation: head %q mean %q; want %q %q", v.FinalHead, v.FinalMean, wantHead, wantMean)
	}
	if want := "mean over 4 of 6 sites: site-a, site-b, site-e, site-f"; v.FinalOver != want {
		t.Errorf("the mean is said to be %q, want %q", v.FinalOver, want)
	}
	if want := "site-c: rounds 118–199"; v.Absences != want {
		t.Errorf("absences read %q, want %q", v.Absences, want)
	}
	if v.Sites[2][5] != "rounds 118–199" {
		t.Errorf("site-c's row says absent %q", v.Sites[2][5])
	}
	if len(v.RoundRows) != 20 || !strings.HasPrefix(v.RoundsPage, "page 1 of 10") {
		t.Fatalf("rounds table: %d rows, %q; want 20, page 1 of 10", len(v.RoundRows), v.RoundsPage)
	}
	row := v.RoundRows[0]
	want := []string{"199", "1.25", "4", "site-c", strconv.FormatFloat(last.FitMean["loss"], 'g', 3, 64), "8,704", "4,352", ""}
	if !slices.Equal(row, want) {
		t.Errorf("latest round's row %q, want %q", row, want)
	}
	if !slices.Equal(slices.Sorted(slices.Values(v.SiteTitles)), []string{"site-a", "site-b", "site-c", "site-e", "site-f"}) {
		t.Errorf("the curve's site lines are titled %q, want the site names", v.SiteTitles)
	}
}

// checkTicks: tick labels are round numbers — at most four decimals, a
// constant step of 1, 2, 2.5 or 5 times a power of ten — never 82.2689
// or 7.615e-4.
func checkTicks(t *testing.T, v pageView) {
	t.Helper()
	plain := regexp.MustCompile(`^-?\d+(\.\d{1,4})?$`)
	for name, ticks := range map[string][]string{"HM axis": v.YTicks, "loss axis": v.LossTicks, "round axis": v.XTicks} {
		if len(ticks) < 3 || len(ticks) > 9 {
			t.Errorf("%s has %d ticks %q", name, len(ticks), ticks)
			continue
		}
		var vals []float64
		for _, s := range ticks {
			x, err := strconv.ParseFloat(s, 64)
			if !plain.MatchString(s) || err != nil {
				t.Errorf("%s tick %q is not a plain short number (all: %q)", name, s, ticks)
			}
			vals = append(vals, x)
		}
		step := vals[1] - vals[0]
		m := step / math.Pow(10, math.Floor(math.Log10(step)))
		if !slices.ContainsFunc([]float64{1, 2, 2.5, 5}, func(w float64) bool { return math.Abs(m-w) < 1e-6 }) {
			t.Errorf("%s step %g is not 1, 2, 2.5 or 5 × 10^k: %q", name, step, ticks)
		}
		for i := 1; i < len(vals); i++ {
			if math.Abs(vals[i]-vals[i-1]-step) > step*1e-6 {
				t.Errorf("%s ticks not evenly spaced: %q", name, ticks)
			}
		}
	}
}

// checkEventLog: the log holds every event (more than the 200 the old page
// kept); ordered oldest first its first line is the first registration;
// filtered by kind it lists the five registrations only.
func checkEventLog(t *testing.T, ctx context.Context, all int) {
	t.Helper()
	if all <= 200 {
		t.Fatalf("test log of %d events does not outgrow 200", all)
	}
	set := func(id, val string) {
		js := fmt.Sprintf(`(() => { const e = document.getElementById(%q); e.value = %q; e.dispatchEvent(new Event("change")); return true; })()`, id, val)
		var ok bool
		if err := chromedp.Run(ctx, chromedp.Evaluate(js, &ok)); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(what string, cond func(v pageView) bool) pageView {
		var v pageView
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if err := v.read(ctx); err != nil {
				t.Fatal(err)
			}
			if cond(v) {
				return v
			}
		}
		t.Fatalf("%s: the event log shows %q, %q", what, v.EventPage, v.EventRows)
		return v
	}
	v := wait("newest first", func(v pageView) bool { return len(v.EventRows) == 25 && v.EventRows[0][3] == "round_end" })
	if want := fmt.Sprintf("page 1 of %d (%d of %d events)", (all+24)/25, all, all); v.EventPage != want {
		t.Errorf("event pager %q, want %q", v.EventPage, want)
	}
	set("ev-order", "oldest")
	v = wait("oldest first", func(v pageView) bool { return len(v.EventRows) > 0 && v.EventRows[0][3] == "register" })
	if r := v.EventRows[0]; r[1] != "0" || r[2] != "site-a" || r[4] != "client 0, 10 examples" {
		t.Errorf("first event %q, want site-a's registration in round 0", r)
	}
	set("ev-kind", "register")
	v = wait("registrations", func(v pageView) bool { return len(v.EventRows) == 5 })
	for i, r := range v.EventRows {
		if r[3] != "register" {
			t.Errorf("filtered to registrations, row %d is %q", i, r)
		}
	}
	set("ev-kind", "coordinator_restart")
	v = wait("restart", func(v pageView) bool { return len(v.EventRows) == 1 })
	if r := v.EventRows[0]; r[1] != "150" || !strings.Contains(r[4], "restarted") {
		t.Errorf("restart event %q", r)
	}
}

// screenshot takes a PNG of the whole page and keeps it in the test's
// artifact folder (go test -artifacts).
func screenshot(t *testing.T, ctx context.Context, name string) []byte {
	t.Helper()
	var shot []byte
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&shot, 100)); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log("screenshot:", path)
	return shot
}
