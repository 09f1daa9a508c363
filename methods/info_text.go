package methods

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// What `pfedmma methods` prints: the list of methods, or one method's
// details.

// listWidth is the widest line `pfedmma methods` prints: an 80-column
// terminal shows each without wrapping.
const listWidth = 79

// WriteList prints one line per method, its name and what it
// trains, cut to listWidth columns, then how to see the rest.
func WriteList(w io.Writer, infos []Info) error {
	pad := len("METHOD")
	for _, i := range infos {
		pad = max(pad, utf8.RuneCountInString(i.Name))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-*s  %s\n", pad, "METHOD", "TRAINS")
	for _, i := range infos {
		fmt.Fprintf(&b, "%-*s  %s\n", pad, i.Name, clipRunes(i.Trains, listWidth-pad-2))
	}
	b.WriteString("\n`pfedmma methods NAME`: what a method trains and shares, and its paper.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteDetails prints a method's name, what it trains and shares, its
// paper and its authors' training loader, each wrapped at listWidth columns.
func (i Info) WriteDetails(w io.Writer) error {
	var b strings.Builder
	b.WriteString(i.Name + "\n")
	fields := [][2]string{{"trains", i.Trains}, {"shares", i.Shares}, {"paper", i.Paper}}
	if i.Loader != "" {
		fields = append(fields, [2]string{"loader", i.Loader.describe()})
	}
	for _, f := range fields {
		lines := wrap(f[1], listWidth-10)
		for n, l := range lines {
			label := ""
			if n == 0 {
				label = f[0]
			}
			fmt.Fprintf(&b, "  %-8s%s\n", label, l)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// clipRunes cuts s to at most n runes, ending a cut string with "…".
func clipRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return strings.TrimRight(string(r[:n-1]), " ,;(") + "…"
}

// wrap splits s into lines of at most n runes at spaces (a longer word
// stays whole on its own line).
func wrap(s string, n int) []string {
	var lines []string
	var cur string
	for _, word := range strings.Fields(s) {
		switch {
		case cur == "":
			cur = word
		case utf8.RuneCountInString(cur)+1+utf8.RuneCountInString(word) <= n:
			cur += " " + word
		default:
			lines = append(lines, cur)
			cur = word
		}
	}
	if cur != "" || len(lines) == 0 {
		lines = append(lines, cur)
	}
	return lines
}

// describe says what the loader does with a partial last batch, as
// `pfedmma methods NAME` prints it.
func (l Loader) describe() string {
	if l.DropsLast() {
		return string(l) + ": the authors' loader drops an epoch's partial last batch (train.drop_last auto drops it)"
	}
	return string(l) + ": the authors' loader keeps an epoch's partial last batch (train.drop_last auto keeps it)"
}
