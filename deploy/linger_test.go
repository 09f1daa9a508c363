package deploy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/report"
)

// TestServeWritesResultsBeforeLinger (issue 36): `serve` writes its
// results as soon as the rounds end — with --linger the dashboard stays
// up, but summary.json (naming over whom the means are) is there while it
// lingers, and Serve returns the result once the lingering ends.
func TestServeWritesResultsBeforeLinger(t *testing.T) {
	model := smallModel(t)
	e := tinyConfig(t, "federation.rounds=2")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	state := t.TempDir()
	sites := []string{"site-a", "site-b"}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	type served struct {
		res *experiment.Result
		err error
	}
	done := make(chan served, 1)
	go func() {
		res, err := Serve(ctx, ServeConfig{Experiment: e, Model: model, Listen: addr, HTTP: "127.0.0.1:0", Linger: 10 * time.Minute,
			Insecure: true, Sites: sites, State: state, MinFit: 1, RoundTimeout: time.Minute, Logger: quiet})
		done <- served{res, err}
	}()
	for _, name := range sites {
		go Site(ctx, SiteConfig{Server: addr, Name: name, Insecure: true, Sites: sites, Data: "world", Model: model,
			State: filepath.Join(t.TempDir(), name), Logger: quiet})
	}
	summary := filepath.Join(state, "out", "summary.json")
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(summary); err == nil {
			break
		}
		select {
		case s := <-done:
			t.Fatalf("serve ended (%v) before writing %s", s.err, summary)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 5 minutes (the rounds done, the dashboard lingering 10)", summary)
		}
	}
	select {
	case s := <-done:
		t.Fatalf("serve returned (%v) instead of lingering", s.err)
	case <-time.After(500 * time.Millisecond):
	}
	sum, err := report.ReadSummary(summary)
	if err != nil {
		t.Fatal(err)
	}
	if over, _ := sum.Extra["mean_over"].(map[string]any); over["pfedmma"] == nil {
		t.Errorf("summary.json says over whom the mean is: %v", sum.Extra["mean_over"])
	}
	cancel()
	s := <-done
	if s.err != nil || s.res == nil || s.res.OutDir != filepath.Join(state, "out") {
		t.Fatalf("serve after --linger: %+v, %v", s.res, s.err)
	}
}
