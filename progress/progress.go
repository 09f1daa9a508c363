// Package progress reports the progress of long work (rounds, clients,
// batches) with rate and ETA: a live bar on a terminal, throttled plain log
// lines elsewhere (CI, pipes, files), nothing in quiet mode.
//
// Bars nest: a round bar owns a client bar, which owns a batch bar. Only the
// innermost unfinished bar is drawn, prefixed by the positions of its
// ancestors, and the ETA is that of the outermost bar, estimated from the
// fractional progress of the whole tree:
//
//	round 3/10 client 2/10 batch 12/40 | 35.2 img/s | ETA 1m20s
//
// A tree of bars is meant to be driven from one goroutine at a time; all
// methods are nevertheless safe for concurrent use.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Mode selects how a bar is shown.
type Mode int

const (
	// Auto draws a live bar when the writer is a terminal and prints plain
	// lines otherwise.
	Auto Mode = iota
	// Terminal always draws a live bar with carriage returns.
	Terminal
	// Plain prints one status line at most every interval.
	Plain
	// Quiet prints nothing; counts are still kept (see Bar.String).
	Quiet
)

// DefaultInterval is the minimum time between two plain status lines.
const DefaultInterval = 5 * time.Second

// Option configures a root bar made by New.
type Option func(*tree)

// WithMode sets the display mode (default Auto).
func WithMode(m Mode) Option { return func(t *tree) { t.mode = m } }

// WithInterval sets the minimum time between plain status lines
// (default DefaultInterval). A value ≤ 0 prints on every update.
func WithInterval(d time.Duration) Option { return func(t *tree) { t.interval = d } }

// tree is the state shared by a root bar and all its descendants.
type tree struct {
	mu       sync.Mutex
	w        io.Writer
	mode     Mode
	interval time.Duration
	now      func() time.Time
	lastLog  time.Time // last plain line
	lastDraw time.Time // last terminal redraw
	root     *Bar
}

// Bar counts the steps of one level of work. Make a root bar with New and
// nested bars with Child.
type Bar struct {
	t      *tree
	parent *Bar
	child  *Bar // innermost unfinished child, if any
	desc   string
	unit   string
	total  int
	n      int
	items  int
	start  time.Time
	done   bool
	pb     *progressbar.ProgressBar // terminal mode, created when first drawn
}

// New returns a root bar of total steps described by desc (e.g. "round"),
// whose rate is counted in unit (e.g. "round" or "img"). A nil writer makes a
// quiet bar. A total ≤ 0 means the total is unknown: no ETA is shown.
func New(w io.Writer, total int, desc, unit string, opts ...Option) *Bar {
	t := &tree{w: w, interval: DefaultInterval, now: time.Now}
	for _, o := range opts {
		o(t)
	}
	if w == nil {
		t.mode = Quiet
	}
	if t.mode == Auto {
		t.mode = Plain
		if isTerminal(w) {
			t.mode = Terminal
		}
	}
	b := &Bar{t: t, desc: desc, unit: unit, total: total, start: t.now()}
	t.root = b
	t.lastLog = b.start
	return b
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Child returns a bar nested in b, e.g. the clients of one round. It replaces
// any previous unfinished child of b, which is finished first.
func (b *Bar) Child(total int, desc, unit string) *Bar {
	b.t.mu.Lock()
	defer b.t.mu.Unlock()
	if b.child != nil {
		b.child.finishLocked()
	}
	if b.pb != nil {
		_ = b.pb.Clear()
	}
	c := &Bar{t: b.t, parent: b, desc: desc, unit: unit, total: total, start: b.t.now()}
	b.child = c
	return c
}

// Add advances the bar by n steps; each step counts as one unit for the rate.
func (b *Bar) Add(n int) { b.AddItems(n, n) }

// AddItems advances the bar by steps and counts items units for the rate,
// e.g. one batch of 32 images: AddItems(1, 32).
func (b *Bar) AddItems(steps, items int) {
	b.t.mu.Lock()
	defer b.t.mu.Unlock()
	if b.done {
		return
	}
	b.n += steps
	b.items += items
	b.updateLocked()
}

// Describe changes the description of the bar's steps.
func (b *Bar) Describe(s string) {
	b.t.mu.Lock()
	defer b.t.mu.Unlock()
	b.desc = s
	b.updateLocked()
}

// Finish marks the bar and its unfinished descendants done. Finishing the
// root prints a final line (except in quiet mode); finishing a nested bar
// returns the display to its parent. Finish is idempotent.
func (b *Bar) Finish() {
	b.t.mu.Lock()
	defer b.t.mu.Unlock()
	b.finishLocked()
}

// String returns the current status line of the whole tree, as a plain line
// would print it.
func (b *Bar) String() string {
	b.t.mu.Lock()
	defer b.t.mu.Unlock()
	return b.t.statusLocked()
}

func (b *Bar) finishLocked() {
	if b.done {
		return
	}
	if b.child != nil {
		b.child.finishLocked()
	}
	b.done = true
	t := b.t
	if b.pb != nil {
		_ = b.pb.Clear()
		b.pb = nil
	}
	if b.parent != nil {
		if b.parent.child == b {
			b.parent.child = nil
		}
		return
	}
	// Root: one final line in every visible mode.
	if t.mode == Quiet {
		return
	}
	elapsed := t.now().Sub(b.start)
	line := fmt.Sprintf("%s %s | %s | done in %s", b.desc, count(b.n, b.total),
		rate(b.items, elapsed, b.unit), fmtDuration(elapsed))
	fmt.Fprintln(t.w, line)
}

// leafLocked returns the innermost unfinished bar.
func (t *tree) leafLocked() *Bar {
	b := t.root
	for b.child != nil {
		b = b.child
	}
	return b
}

// updateLocked shows the tree's status if the mode and throttling allow.
func (b *Bar) updateLocked() {
	t := b.t
	switch t.mode {
	case Plain:
		now := t.now()
		if now.Sub(t.lastLog) < t.interval {
			return
		}
		t.lastLog = now
		fmt.Fprintln(t.w, t.statusLocked())
	case Terminal:
		now := t.now()
		leaf := t.leafLocked()
		if leaf != b {
			return // the parent's step is drawn when it is the leaf again
		}
		if leaf.pb != nil && now.Sub(t.lastDraw) < 100*time.Millisecond && (leaf.total <= 0 || leaf.n < leaf.total) {
			return
		}
		t.lastDraw = now
		if leaf.pb == nil {
			max := int64(leaf.total)
			if max <= 0 {
				max = -1
			}
			leaf.pb = progressbar.NewOptions64(max,
				progressbar.OptionSetWriter(t.w),
				progressbar.OptionSetWidth(20),
				progressbar.OptionClearOnFinish(),
				progressbar.OptionSetPredictTime(false),
				progressbar.OptionSetElapsedTime(false),
				progressbar.OptionThrottle(0),
				// No background spinner goroutine: it would write
				// outside our lock and outlive the bar.
				progressbar.OptionSetSpinnerChangeInterval(0),
			)
		}
		// Count first, then the description, so the last render is
		// consistent; Describe always redraws.
		if leaf.total > 0 {
			_ = leaf.pb.Set(min(leaf.n, leaf.total))
		}
		leaf.pb.Describe(t.statusLocked())
	}
}

// statusLocked formats "round 3/10 client 2/10 batch 12/40 | 35.2 img/s | ETA 1m20s".
func (t *tree) statusLocked() string {
	var sb strings.Builder
	now := t.now()
	var leaf *Bar
	for b := t.root; b != nil; b = b.child {
		if sb.Len() > 0 {
			sb.WriteByte(' ')
		}
		pos := b.n
		if b.child != nil && (b.total <= 0 || b.n < b.total) {
			pos++ // the step in progress
		}
		sb.WriteString(b.desc)
		sb.WriteByte(' ')
		sb.WriteString(count(pos, b.total))
		leaf = b
	}
	sb.WriteString(" | ")
	sb.WriteString(rate(leaf.items, now.Sub(leaf.start), leaf.unit))
	sb.WriteString(" | ETA ")
	sb.WriteString(eta(t.root, now))
	return sb.String()
}

// fraction is the completed fraction of b in [0,1], counting the fractional
// progress of its unfinished child within the current step; -1 if unknown.
func fraction(b *Bar) float64 {
	if b.total <= 0 {
		return -1
	}
	f := float64(min(b.n, b.total))
	if b.child != nil && b.n < b.total {
		if cf := fraction(b.child); cf > 0 {
			f += cf
		}
	}
	return min(f/float64(b.total), 1)
}

func eta(root *Bar, now time.Time) string {
	f := fraction(root)
	elapsed := now.Sub(root.start)
	if f <= 0 || elapsed <= 0 {
		return "?"
	}
	if f >= 1 {
		return "0s"
	}
	return fmtDuration(time.Duration(float64(elapsed) * (1 - f) / f))
}

func count(n, total int) string {
	if total <= 0 {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%d/%d", n, total)
}

func rate(items int, elapsed time.Duration, unit string) string {
	if unit == "" {
		unit = "it"
	}
	if elapsed <= 0 {
		return "? " + unit + "/s"
	}
	r := float64(items) / elapsed.Seconds()
	switch {
	case r >= 100:
		return fmt.Sprintf("%.0f %s/s", r, unit)
	case r >= 1:
		return fmt.Sprintf("%.1f %s/s", r, unit)
	default:
		return fmt.Sprintf("%.3g %s/s", r, unit)
	}
}

// fmtDuration rounds d for display: 1m20s, 2h3m0s, 4.2s.
func fmtDuration(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Millisecond).String()
	}
}
