package main

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pfedmma/pfedmma/methods"
)

// TestMethodsFitsTerminal: `pfedmma methods` prints one line per
// registered method, each within 79 columns (before: lines of 476
// characters), and `pfedmma methods NAME` gives what it trains and shares
// and its paper in full (the method's own Info), wrapped the same.
func TestMethodsFitsTerminal(t *testing.T) {
	out, err := execute(t, "methods")
	if err != nil {
		t.Fatal(err)
	}
	checkWidth(t, "methods", out)
	for _, m := range methods.All() {
		name := m.Info().Name
		n := 0
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == name {
				n++
			}
		}
		if n != 1 {
			t.Errorf("methods lists %s on %d lines, want 1:\n%s", name, n, out)
		}
	}
	for _, m := range methods.All() {
		i := m.Info()
		out, err := execute(t, "methods", i.Name)
		if err != nil {
			t.Fatal(err)
		}
		checkWidth(t, "methods "+i.Name, out)
		flat := strings.Join(strings.Fields(out), " ")
		for _, want := range []string{i.Trains, i.Shares, i.Paper} {
			if !strings.Contains(flat, strings.Join(strings.Fields(want), " ")) {
				t.Errorf("methods %s lacks %q:\n%s", i.Name, want, out)
			}
		}
		// its authors' loader, what train.drop_last auto does for it
		verb := map[bool]string{true: "drops", false: "keeps"}[i.Loader.DropsLast()]
		if i.Loader != "" && !strings.Contains(flat, "loader "+string(i.Loader)+": the authors' loader "+verb) {
			t.Errorf("methods %s does not say its loader %s %s a partial last batch:\n%s", i.Name, i.Loader, verb, out)
		}
	}
	if _, err := execute(t, "methods", "nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("methods nope: error %v, want one naming it", err)
	}
}

func checkWidth(t *testing.T, what, out string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(l); n > 79 {
			t.Errorf("%s: a line of %d columns: %q", what, n, l)
		}
	}
}
