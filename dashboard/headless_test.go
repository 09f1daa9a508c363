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
			Strategy: federation.Metrics{"dp_epsilon": 2.5}, BytesUp: 333, BytesDown: 444, Seconds: 2},
	}
	src.st.Fingerprint = "fp-1234abcd"
	src.st.Events = []Event{{Time: time.Now(), Round: 1, Site: "site-b", Kind: "refused", Reason: "examples", Message: "claims 9 examples"}}
	ts := httptest.NewServer(Handler(src, NewMetrics()))
	defer ts.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
		"--dump-dom", ts.URL+"/").Output()
	if ctx.Err() != nil {
		t.Fatalf("headless load did not finish in %v", time.Since(start))
	}
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	dom := string(out)
	for _, want := range []string{
		fmt.Sprintf("<th>%.4f</th>", mean["hm"]), // the mean row's HM
		"<td>2.5000</td>",                        // DP ε
		"<td>0.7500</td>",                        // training loss
		"<td>444</td>", "<td>333</td>",           // bytes
		"claims 9 examples", "refused (examples)", // the event log
		`<code id="fingerprint">fp-1234abcd</code>`,
		`<polyline id="loss-line"`,       // the training-loss chart
		"<title>round 1: 0.7500</title>", // its point of round 1
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := strings.Count(dom, `<tr class="round"><td>`) - strings.Count(dom, `<tr class="round"><td>${`); n != 2 {
		t.Errorf("rounds table has %d rows, want 2", n)
	}
	if n := strings.Count(dom, "<title>site ") - strings.Count(dom, "<title>site ${"); n != 3 {
		t.Errorf("the curve has %d per-site lines, want 3", n)
	}
	if mean["hm"] == (per[0]["hm"]+per[1]["hm"]+per[2]["hm"])/3 {
		t.Fatal("test data does not tell the HM definitions apart")
	}
}
