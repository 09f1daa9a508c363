package progress

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"
)

// fakeClock is a manually advanced clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func withClock(c *fakeClock) Option { return func(t *tree) { t.now = c.now } }

func newFake(t *testing.T, total int, desc, unit string, opts ...Option) (*Bar, *bytes.Buffer, *fakeClock) {
	t.Helper()
	var buf bytes.Buffer
	clk := &fakeClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	opts = append([]Option{withClock(clk)}, opts...)
	return New(&buf, total, desc, unit, opts...), &buf, clk
}

func TestPlainNested(t *testing.T) {
	const rounds, clients, batches, batchSize = 2, 3, 4, 8
	root, buf, clk := newFake(t, rounds, "round", "round", WithMode(Plain), WithInterval(5*time.Second))
	for r := 0; r < rounds; r++ {
		cb := root.Child(clients, "client", "client")
		for c := 0; c < clients; c++ {
			bb := cb.Child(batches, "batch", "img")
			for i := 0; i < batches; i++ {
				clk.advance(time.Second)
				bb.AddItems(1, batchSize)
			}
			bb.Finish()
			cb.Add(1)
		}
		cb.Finish()
		root.Add(1)
	}
	root.Finish()

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	// 24 s of work, one line at most every 5 s, plus the final line.
	if len(lines) < 3 || len(lines) > 24/5+1 {
		t.Fatalf("got %d lines, want 3..%d:\n%s", len(lines), 24/5+1, buf.String())
	}
	// First line after 5 batches: round 1, client 2 (in progress), batch 1 of 4.
	if want := "round 1/2 client 2/3 batch 1/4 | 8.0 img/s | ETA 19s"; lines[0] != want {
		t.Errorf("first line = %q, want %q", lines[0], want)
	}
	status := regexp.MustCompile(`^round \d/2 client \d/3 batch \d/4 \| [0-9.]+ img/s \| ETA \S+$`)
	for _, l := range lines[:len(lines)-1] {
		if !status.MatchString(l) {
			t.Errorf("status line %q does not match %v", l, status)
		}
	}
	if want := "round 2/2 | 0.0833 round/s | done in 24s"; lines[len(lines)-1] != want {
		t.Errorf("final line = %q, want %q", lines[len(lines)-1], want)
	}
}

func TestETA(t *testing.T) {
	tests := []struct {
		name        string
		total, done int
		elapsed     time.Duration
		want        string
	}{
		{"quarter", 40, 10, 20 * time.Second, "ETA 1m0s"},
		{"half", 10, 5, time.Minute, "ETA 1m0s"},
		{"complete", 4, 4, time.Second, "ETA 0s"},
		{"nothing done", 10, 0, time.Second, "ETA ?"},
		{"unknown total", 0, 7, time.Second, "ETA ?"},
		{"overshoot", 2, 5, time.Second, "ETA 0s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, _, clk := newFake(t, tc.total, "batch", "img", WithMode(Quiet))
			clk.advance(tc.elapsed)
			b.Add(tc.done)
			if s := b.String(); !strings.HasSuffix(s, tc.want) {
				t.Errorf("String() = %q, want suffix %q", s, tc.want)
			}
		})
	}
}

func TestZeroTotalNoPanic(t *testing.T) {
	for _, mode := range []Mode{Plain, Terminal, Quiet} {
		b, buf, clk := newFake(t, 0, "step", "", WithMode(mode), WithInterval(0))
		c := b.Child(0, "inner", "img")
		clk.advance(time.Second)
		c.AddItems(1, 10)
		c.Describe("inner2")
		c.Finish()
		b.Add(3)
		b.Finish()
		b.Finish() // idempotent
		if mode == Quiet {
			if buf.Len() != 0 {
				t.Errorf("quiet mode wrote %q", buf.String())
			}
			continue
		}
		if !strings.Contains(buf.String(), "step 3 | 3.0 it/s | done in 1s") {
			t.Errorf("mode %d: output %q lacks final line", mode, buf.String())
		}
		if mode == Plain && !strings.Contains(buf.String(), "step 1 inner2 1 | 10.0 img/s | ETA ?") {
			t.Errorf("plain output %q lacks the unknown-total status line", buf.String())
		}
	}
}

func TestQuietKeepsCounts(t *testing.T) {
	b, buf, clk := newFake(t, 10, "round", "round", WithMode(Quiet))
	clk.advance(10 * time.Second)
	b.Add(5)
	b.Finish()
	if buf.Len() != 0 {
		t.Errorf("quiet bar wrote %q", buf.String())
	}
	if s := b.String(); !strings.HasPrefix(s, "round 5/10 | 0.5 round/s") {
		t.Errorf("String() = %q", s)
	}
	if nb := New(nil, 3, "x", "y"); nb.t.mode != Quiet {
		t.Errorf("nil writer gave mode %d, want Quiet", nb.t.mode)
	}
}

func TestAutoOnBufferIsPlain(t *testing.T) {
	var buf bytes.Buffer
	if b := New(&buf, 1, "x", "y"); b.t.mode != Plain {
		t.Errorf("Auto on a buffer gave mode %d, want Plain", b.t.mode)
	}
}

func TestTerminalDrawsBar(t *testing.T) {
	b, buf, clk := newFake(t, 2, "round", "round", WithMode(Terminal))
	c := b.Child(4, "batch", "img")
	for i := 0; i < 4; i++ {
		clk.advance(time.Second)
		c.AddItems(1, 16)
	}
	out := buf.String()
	for _, want := range []string{"round 1/2 batch 3/4 | 16.0 img/s | ETA 5s", "\r", "75%"} {
		if !strings.Contains(out, want) {
			t.Errorf("terminal output lacks %q:\n%q", want, out)
		}
	}
	c.Finish()
	b.Add(1)
	b.Finish()
}

func TestChildReplacesUnfinished(t *testing.T) {
	b, _, _ := newFake(t, 3, "round", "round", WithMode(Quiet))
	c1 := b.Child(5, "client", "client")
	c1.Add(2)
	c2 := b.Child(5, "client", "client")
	if !c1.done {
		t.Error("old child not finished when replaced")
	}
	c1.Add(1) // ignored: finished
	if c1.n != 2 {
		t.Errorf("finished child advanced to %d", c1.n)
	}
	c2.Add(1)
	if s := b.String(); !strings.HasPrefix(s, "round 1/3 client 1/5") {
		t.Errorf("String() = %q", s)
	}
}

func TestConcurrentAdds(t *testing.T) {
	var buf bytes.Buffer
	b := New(&buf, 0, "img", "img", WithMode(Plain), WithInterval(0))
	c := b.Child(400, "batch", "img")
	done := make(chan struct{})
	for g := 0; g < 4; g++ {
		go func() {
			for i := 0; i < 100; i++ {
				c.AddItems(1, 2)
			}
			done <- struct{}{}
		}()
	}
	for g := 0; g < 4; g++ {
		<-done
	}
	if c.n != 400 || c.items != 800 {
		t.Errorf("counts = %d steps, %d items; want 400, 800", c.n, c.items)
	}
	if !strings.Contains(buf.String(), "batch 400/400") {
		t.Errorf("last status missing from output")
	}
}
