// Package memlimit compares a command's estimated memory need with what the
// machine has available, so that a size no machine can hold is refused
// with the flag or key to lower instead of ending in "fatal error: out of
// memory". `pfedmma run` has its own, finer estimate (package experiment);
// the other commands use Check with theirs.
package memlimit

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// AvailableMiB is the memory the system can give without swapping
// (/proc/meminfo MemAvailable), or 0 when unknown.
func AvailableMiB() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb >> 10
		}
	}
	return 0
}

// Check refuses need bytes (what: what needs them, e.g. "pretraining")
// when they exceed availMiB (≤ 0: unknown, not checked); hint says what to
// lower, in flags or keys.
func Check(what string, need int64, availMiB int64, hint string) error {
	if availMiB <= 0 || need <= availMiB<<20 {
		return nil
	}
	return fmt.Errorf("%s needs about %.1f GiB; the machine has %.1f GiB available: %s",
		what, GiB(need), GiB(availMiB<<20), hint)
}

// GiB converts bytes to GiB.
func GiB(b int64) float64 { return float64(b) / (1 << 30) }

// Mul multiplies non-negative sizes, saturating at MaxInt64 instead of
// overflowing (an estimate from hostile sizes stays huge, never negative).
func Mul(xs ...int64) int64 {
	p := int64(1)
	for _, x := range xs {
		if x <= 0 {
			return 0
		}
		if p > (1<<63-1)/x {
			return 1<<63 - 1
		}
		p *= x
	}
	return p
}

// Add adds non-negative sizes, saturating at MaxInt64.
func Add(xs ...int64) int64 {
	s := int64(0)
	for _, x := range xs {
		if s > 1<<63-1-x {
			return 1<<63 - 1
		}
		s += x
	}
	return s
}
