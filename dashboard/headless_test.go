package dashboard

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/eval"
	"github.com/pfedmma/pfedmma/federation"
)

func chromiumBin(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium not found (the Debian package chromium is installed by make deps)")
	}
	t.Skip("chromium not found: install the Debian package chromium (make deps) to run this test")
	return ""
}

// dumpDOM loads the page of ts in headless Chromium with a virtual-time
// budget and returns the DOM it dumps; the load must end.
func dumpDOM(t *testing.T, bin, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--user-data-dir="+t.TempDir(),
		"--virtual-time-budget=5000", "--dump-dom", url).Output()
	if ctx.Err() != nil {
		t.Fatalf("headless load did not finish in %v", time.Since(start))
	}
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	return string(out)
}

// TestHeadlessLoadFinishes: a headless Chromium load with a virtual-time
// budget ends (the page polls instead of holding a stream open) and the
// page it dumps shows the rounds, the event log and the mean HM of the
// latest round — the HM of the mean local, base and novel.
func TestHeadlessLoadFinishes(t *testing.T) {
	bin := chromiumBin(t)
	src := newFake()
	per := map[int]federation.Metrics{0: eval.BaseToNovel(90, 80, 40), 1: eval.BaseToNovel(60, 70, 90), 2: eval.BaseToNovel(70, 75, 80)}
	mean := eval.ClientMean(per[0], per[1], per[2])
	src.st.History = []federation.RoundReport{
		{Round: 0, Selected: []int{0, 1, 2}, FitMean: federation.Metrics{"loss": 1.25}, BytesUp: 111, BytesDown: 222, Seconds: 1.5},
		{Round: 1, Selected: []int{0, 1, 2}, Eval: per, EvalMean: mean, FitMean: federation.Metrics{"loss": 0.75},
			Strategy: federation.Metrics{"dp_epsilon": 2.5}, BytesUp: 3333, BytesDown: 4444, Seconds: 2},
	}
	src.st.Fingerprint = "fp-1234abcd"
	src.st.Events = []Event{{Time: time.Now(), Round: 1, Site: "site-b", Kind: "refused", Reason: "examples", Message: "claims 9 examples"}}
	ts := httptest.NewServer(Handler(src, NewMetrics()))
	defer ts.Close()
	dom := dumpDOM(t, bin, ts.URL+"/")
	for _, want := range []string{
		fmt.Sprintf(`<th class="n">%.2f</th>`, mean["hm"]),     // the mean row's HM
		`<td class="n">2.50</td>`,                              // DP ε
		`<td class="n">0.75</td>`,                              // training loss
		`<td class="n">4,444</td>`, `<td class="n">3,333</td>`, // payload bytes
		"claims 9 examples", "refused (examples)", // the event log
		`<code id="fingerprint">fp-1234abcd</code>`,
		`<polyline id="loss-line"`,     // the training-loss chart
		"<title>round 1: 0.75</title>", // its point of round 1
		"mean over all 3 sites",        // over whom
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := strings.Count(dom, `<tr class="round"><td class="n">`) - strings.Count(dom, `<tr class="round"><td class="n">${`); n != 2 {
		t.Errorf("rounds table has %d rows, want 2", n)
	}
	for _, name := range []string{"site-a", "site-b", "site-c"} {
		if !strings.Contains(dom, "<title>"+name+"</title></polyline>") {
			t.Errorf("no curve titled %s", name)
		}
	}
	if mean["hm"] == (per[0]["hm"]+per[1]["hm"]+per[2]["hm"])/3 {
		t.Fatal("test data does not tell the HM definitions apart")
	}
}

// TestHeadlessWaiting: before the first round the page says it waits for
// sites and how many rounds the job has — never "round 0 of 0".
func TestHeadlessWaiting(t *testing.T) {
	bin := chromiumBin(t)
	src := newFake()
	src.st.Phase, src.st.Rounds = "waiting", 200
	src.st.Job = Job{Method: "pfedmma", Preset: "world-deploy", Protocol: "base2novel"}
	src.st.Sites[2].Registered, src.st.Sites[2].State = false, "unregistered"
	ts := httptest.NewServer(Handler(src, NewMetrics()))
	defer ts.Close()
	dom := dumpDOM(t, bin, ts.URL+"/")
	for _, want := range []string{
		`<span id="progress">waiting for sites: 2 of 3 registered; 200 rounds to run</span>`,
		`<dd id="job-method">pfedmma</dd>`, `<dd id="job-preset">world-deploy</dd>`, `<dd id="job-protocol">base2novel</dd>`,
		`<dd id="job-rounds">200</dd>`, `class="badge s-idle">unregistered</span>`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the waiting page lacks %q", want)
		}
	}
	for _, bad := range []string{"round 0 of 0", "0 of 0 rounds", "0 of 200 rounds done"} {
		if strings.Contains(dom, bad) {
			t.Errorf("the waiting page says %q", bad)
		}
	}
}

// TestHeadlessDeparted: a site revoked in round 2 of 6 (absent there, out
// of the schedule from round 3) is named once as departed, "site-c
// departed at round 3 (revoked)", in the departed list and its row of the
// sites table, with its one absent round; the mean says it is over the
// two others with site-c departed.
func TestHeadlessDeparted(t *testing.T) {
	bin := chromiumBin(t)
	src := newFake()
	for r := range 6 {
		rep := federation.RoundReport{Round: r, Selected: []int{0, 1, 2}, Participants: []int{0, 1, 2}, Seconds: 1,
			Eval: map[int]federation.Metrics{0: eval.BaseToNovel(80, 70, 60), 1: eval.BaseToNovel(70, 60, 50), 2: eval.BaseToNovel(60, 50, 40)}}
		switch {
		case r == 2:
			rep.Participants, rep.Absent = []int{0, 1}, []int{2}
			delete(rep.Eval, 2)
		case r > 2:
			rep.Selected, rep.Participants, rep.Departed = []int{0, 1}, []int{0, 1}, []int{2}
			delete(rep.Eval, 2)
		}
		rep.EvalMean = eval.ClientMean(rep.Eval[0], rep.Eval[1])
		src.st.History = append(src.st.History, rep)
	}
	src.st.Sites[2].State = "revoked"
	ts := httptest.NewServer(Handler(src, NewMetrics()))
	defer ts.Close()
	dom := dumpDOM(t, bin, ts.URL+"/")
	for _, want := range []string{
		`<li class="departure"><b>site-c</b> departed at round 3 (revoked)</li>`,
		`<li class="absence"><b>site-c</b>: round 2</li>`,
		"<td>round 2; departed at round 3 (revoked)</td>",
		"mean over 2 of 3 sites: site-a, site-b (site-c departed)",
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := strings.Count(dom, "departed at round 3"); n != 2 {
		t.Errorf("%d mentions of the departure, want 2 (the list and the site's row)", n)
	}
}
