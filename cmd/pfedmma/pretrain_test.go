package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/pretrain"
)

// TestPretrainCommandRoundTrip checks that the reproduce command written to
// pretrain.json parses back into the same options.
func TestPretrainCommandRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*pretrain.Options)
	}{
		{"defaults", func(*pretrain.Options) {}},
		{"edited", func(o *pretrain.Options) {
			o.OutDir, o.Steps, o.LR, o.WorldSeed, o.DType = "my model's dir/tiny", 77, 3.5e-4, 9, "bf16"
			o.FashionDir, o.HoldoutFraction = "/data/fashion", 0.3
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := pretrain.DefaultOptions()
			tc.edit(&want)
			line := want.Command()
			args := shellSplit(line)
			if len(args) < 2 || args[0] != "pfedmma" || args[1] != "pretrain" {
				t.Fatalf("command %q", line)
			}
			got := pretrain.DefaultOptions()
			got.OutDir = "elsewhere"
			if err := newPretrainCmd(&got).ParseFlags(args[2:]); err != nil {
				t.Fatalf("parse %q: %v", line, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%q parses to\n%+v, want\n%+v", line, got, want)
			}
		})
	}
}

// shellSplit splits a command line into words as a POSIX shell does for
// plain words and single-quoted strings.
func shellSplit(line string) []string {
	var out []string
	var cur strings.Builder
	inWord, quoted, escaped := false, false, false
	for _, r := range line {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case quoted && r == '\'':
			quoted = false
		case quoted:
			cur.WriteRune(r)
		case r == '\'':
			quoted, inWord = true, true
		case r == ' ':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		case r == '\\':
			escaped, inWord = true, true
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}
