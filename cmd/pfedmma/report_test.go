package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/report"
)

// TestReportCommand re-draws three runs and compares them: per-run figures
// in PNG and SVG, the averaged table and the radar chart.
func TestReportCommand(t *testing.T) {
	t.Cleanup(func() { resetCommand(t, "run"); resetCommand(t, "report") })
	model := tinyWorldModel(t)
	var dirs []string
	for seed := 1; seed <= 3; seed++ {
		out := filepath.Join(t.TempDir(), fmt.Sprintf("run%d", seed))
		resetCommand(t, "run")
		rootCmd.SetArgs([]string{"run", "--quiet", "--out", out, "--set", "model=" + model,
			"--set", "dataset.num_classes=8", "--set", "federation.clients=2", "--set", "federation.rounds=1",
			"--set", "pfedmma.dim=8", "--set", fmt.Sprintf("seed=%d", seed), "--set", "methods=[zeroshot,promptfl]",
			"--set", "promptfl.n_ctx=2"})
		rootCmd.SetOut(&bytes.Buffer{})
		if err := rootCmd.Execute(); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"curves.png", "curves.svg", "final.png", "final.svg"} {
			if err := os.Remove(filepath.Join(out, f)); err != nil {
				t.Fatal(err)
			}
		}
		dirs = append(dirs, out)
	}
	cmp := filepath.Join(t.TempDir(), "cmp")
	var buf bytes.Buffer
	rootCmd.SetOut(&buf)
	resetCommand(t, "report")
	rootCmd.SetArgs(append(append([]string{"report"}, dirs...), "--out", cmp))
	if err := rootCmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		for _, f := range []string{"curves.png", "curves.svg", "final.png", "final.svg", "report.md"} {
			if _, err := os.Stat(filepath.Join(d, f)); err != nil {
				t.Errorf("report did not re-draw %s: %v", f, err)
			}
		}
	}
	for _, f := range []string{"radar.png", "radar.svg", "summary.json", "report.md"} {
		if _, err := os.Stat(filepath.Join(cmp, f)); err != nil {
			t.Errorf("comparison lacks %s: %v", f, err)
		}
	}
	if !strings.Contains(buf.String(), "Average on 3 datasets") || !strings.Contains(buf.String(), "promptfl") {
		t.Errorf("report output:\n%s", buf.String())
	}
	resetCommand(t, "report")
	rootCmd.SetArgs(append([]string{"report"}, dirs...))
	if err := rootCmd.Execute(); err == nil || !strings.Contains(err.Error(), "--out") {
		t.Errorf("several runs without --out: %v", err)
	}
}

// TestReportLODO: runs over every held-out domain are re-drawn from their
// lodo.json (matrices, G/P/C, generalisation table), and two of them give
// FedOT's Table 1 over datasets; a mix with an ordinary run is refused.
func TestReportLODO(t *testing.T) {
	doms := []string{"photo", "sketch"}
	var dirs []string
	for k, ds := range []string{"pacs", "vlcs"} {
		m, err := report.NewLODOMatrix("fedot", doms, []report.Fold{
			{HeldOut: "photo", Global: 60 + float64(k), Personal: map[string]float64{"sketch": 80}},
			{HeldOut: "sketch", Global: 50, Personal: map[string]float64{"photo": 90}}})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := report.WriteLODO(filepath.Join(dir, report.LODOFile), report.LODORun{Dataset: ds, Protocol: "leave_one_domain_out",
			Domains: doms, Matrices: []report.LODOMatrix{m}}); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dir)
	}
	cmp := filepath.Join(t.TempDir(), "cmp")
	out, err := execute(t, append(append([]string{"report"}, dirs...), "--out", cmp)...)
	if err != nil {
		t.Fatal(err)
	}
	// pacs: G = (60+50)/2 = 55, P = (80+90)/2 = 85; vlcs: G 55.5
	for _, want := range []string{"Pacs G", "Vlcs C", "Average G", "55.25", "85.00"} {
		if !strings.Contains(out, want) {
			t.Errorf("report output lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{filepath.Join(dirs[0], "report.md"), filepath.Join(cmp, "report.md")} {
		if _, err := os.Stat(f); err != nil {
			t.Error(err)
		}
	}
	if _, err := execute(t, "report", dirs[0], t.TempDir(), "--out", cmp); err == nil || !strings.Contains(err.Error(), "not a leave-one-domain-out run") {
		t.Errorf("mixed runs: %v", err)
	}
}

// TestReportRefusesDamagedResults: `report` refuses, naming the file and
// field, a summary whose protocol no run writes and a metrics line whose
// mean is empty (no metric, no absent client), and draws the same files
// once they are right.
func TestReportRefusesDamagedResults(t *testing.T) {
	t.Cleanup(func() { resetCommand(t, "report") })
	write := func(dir, protocol, mean string) {
		t.Helper()
		sum := `{"protocol": "` + protocol + `", "metrics": ["acc"], "methods": {"fedavg": {"acc": 50}}}` + "\n"
		met := `{"round": 0, "method": "fedavg", "mean": {"acc": 40}}` + "\n" + `{"round": 1, "method": "fedavg", "mean": ` + mean + "}\n"
		if err := os.WriteFile(filepath.Join(dir, report.SummaryFile), []byte(sum), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, report.MetricsJSONL), []byte(met), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		protocol, mean string
		want           []string
	}{
		{"martian", `{"acc": 50}`, []string{report.SummaryFile, `"protocol"`, `"martian"`, "dirichlet"}},
		{"dirichlet", `{}`, []string{report.MetricsJSONL, "round 1", `"mean" is empty`}},
		{"dirichlet", `null`, []string{report.MetricsJSONL, "round 1", `"mean" is empty`}},
		{"dirichlet", `{"acc": 50}`, nil},
	} {
		dir := t.TempDir()
		write(dir, c.protocol, c.mean)
		resetCommand(t, "report")
		rootCmd.SetOut(&bytes.Buffer{})
		rootCmd.SetArgs([]string{"report", dir})
		err := rootCmd.Execute()
		if c.want == nil {
			if err != nil {
				t.Errorf("a sound run: %v", err)
			} else if _, err := os.Stat(filepath.Join(dir, "curves.png")); err != nil {
				t.Errorf("a sound run was not drawn: %v", err)
			}
			continue
		}
		if err == nil {
			t.Errorf("protocol %q, mean %s: report drew it", c.protocol, c.mean)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("protocol %q, mean %s: error %q does not name %s", c.protocol, c.mean, err, w)
			}
		}
	}
}

// TestCLIErrorsInPlainWords: the binary prints a damaged summary's error
// without Go's wording (before: "strconv.ParseFloat: parsing "x": invalid
// syntax"; "Go struct field RoundRecord.round of type int").
func TestCLIErrorsInPlainWords(t *testing.T) {
	for _, c := range []struct{ summary, metrics, want string }{
		{`{"protocol": "dirichlet", "metrics": ["acc"], "methods": {"a": {"acc": "x"}}}`, `{"round": 0, "method": "a", "mean": {"acc": 5}}`, `"x" is not a number`},
		{`{"protocol": "dirichlet", "metrics": ["acc"], "methods": {"a": {"acc": 5}}}`, `{"round": "x", "method": "a", "mean": {"acc": 5}}`, `field "round": a JSON string where a whole number is expected`},
	} {
		dir := writeRunResults(t, c.summary, c.metrics+"\n")
		r := cli(t, cliOptions{}, "report", dir)
		if r.Code == 0 || !strings.Contains(r.Stderr, c.want) {
			t.Errorf("report: exit %d, stderr %q, want %q", r.Code, r.Stderr, c.want)
		}
		for _, bad := range []string{"strconv", "Go struct", "Go value"} {
			if strings.Contains(r.Stderr, bad) {
				t.Errorf("report: stderr %q says %q", r.Stderr, bad)
			}
		}
	}
}

// writeRunResults writes a run folder holding only summary.json and
// metrics.jsonl (what report reads).
func writeRunResults(t *testing.T, summary, metrics string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), []byte(summary), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(metrics), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestReportRefusesCorruptMetrics: report refuses metrics it cannot draw
// truthfully, naming the file (and the line): accuracies out of [0, 100],
// negative or repeated rounds, a truncated last line (before: dropped, so
// the method's curve vanished while its table row stayed), a summary method
// without a curve, unknown fields; the intact files are drawn.
func TestReportRefusesCorruptMetrics(t *testing.T) {
	const summary = `{"protocol": "base2novel", "metrics": ["local", "base", "novel", "hm"],
 "methods": {"zeroshot": {"local": 60, "base": 60, "novel": 60, "hm": 60}, "pfedmma": {"local": 90, "base": 70, "novel": 65, "hm": 74}}}`
	line := func(method string, round int, local string) string {
		return fmt.Sprintf(`{"round":%d,"method":%q,"mean":{"local":%s,"base":60,"novel":60,"hm":60},"clients":[{"id":0,"metrics":{"local":%s,"base":60,"novel":60,"hm":60}}]}`+"\n", round, method, local, local)
	}
	good := line("zeroshot", 0, "60") + line("pfedmma", 0, "80") + line("pfedmma", 1, "90")
	for _, c := range []struct {
		name, summary, metrics string
		want                   []string
	}{
		{"accuracy 1e308", summary, line("zeroshot", 0, "60") + line("pfedmma", 0, "1e308"), []string{"metrics.jsonl", "line 2", "local", "1e+308"}},
		{"accuracy -1e9 in a client", summary, good + line("pfedmma", 2, "-1e9"), []string{"metrics.jsonl", "line 4", "-1e+09"}},
		{"summary accuracy 1e308", strings.Replace(summary, `"local": 90`, `"local": 1e308`, 1), good, []string{"summary.json", "pfedmma", "1e+308"}},
		{"summary accuracy -1e9", strings.Replace(summary, `"hm": 74`, `"hm": -1e9`, 1), good, []string{"summary.json", "hm"}},
		{"round -5", summary, good + line("pfedmma", -5, "90"), []string{"metrics.jsonl", "line 4", "-5"}},
		{"repeated round", summary, good + line("pfedmma", 1, "90"), []string{"metrics.jsonl", "line 4", "round 1"}},
		{"truncated last line", summary, good + line("pfedmma", 2, "91")[:40], []string{"metrics.jsonl", "line 4", "truncated"}},
		{"method without a curve", summary, line("zeroshot", 0, "60") + line("pfedmma", 0, "80")[:50], []string{"metrics.jsonl", "line 2", "truncated"}},
		{"summary method missing from metrics", summary, line("zeroshot", 0, "60"), []string{"summary.json", "pfedmma", "metrics.jsonl"}},
		{"unknown field", summary, good + `{"round":3,"method":"pfedmma","mean":{"local":1},"acc":5}` + "\n", []string{"metrics.jsonl", "line 4", "acc"}},
		{"garbage line", summary, good[:len(good)/2] + "\nxx\n" + good[len(good)/2:], []string{"metrics.jsonl", "line"}},
		{"summary not JSON", "{", good, []string{"summary.json"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeRunResults(t, c.summary, c.metrics)
			_, err := execute(t, "report", dir)
			assertRefused(t, c.name, err, filepath.Join(dir, "curves.png"), c.want...)
		})
	}
	dir := writeRunResults(t, summary, good)
	if out, err := execute(t, "report", dir); err != nil || !strings.Contains(out, "pfedmma") {
		t.Fatalf("intact files: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "curves.png")); err != nil {
		t.Errorf("intact files: no curves drawn: %v", err)
	}
}

// TestReportRefusesFIFO: report on a run folder whose summary.json or
// metrics.jsonl is a FIFO fails at once naming it (before: it blocked).
func TestReportRefusesFIFO(t *testing.T) {
	const summary = `{"protocol": "base2novel", "metrics": ["local"], "methods": {"pfedmma": {"local": 50}}}`
	const metrics = `{"round":0,"method":"pfedmma","mean":{"local":50}}` + "\n"
	for _, name := range []string{"summary.json", "metrics.jsonl"} {
		dir := writeRunResults(t, summary, metrics)
		p := filepath.Join(dir, name)
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
		done := make(chan error, 1)
		go func() { _, err := execute(t, "report", dir); done <- err }()
		select {
		case err := <-done:
			assertRefused(t, name+" FIFO", err, "", p, "FIFO")
		case <-time.After(10 * time.Second):
			t.Fatalf("report blocked on the FIFO %s", p)
		}
	}
}
