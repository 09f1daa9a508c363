package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/tokenizer"
)

func TestTokenizeCommand(t *testing.T) {
	tok := tokenizer.FromMerges(tokenizer.Learn([]string{"a photo of a cat.", "a photo of a dog."}, 40))
	vocab := filepath.Join(t.TempDir(), "small.txt.gz")
	if err := tok.WriteBPEGz(vocab); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("photo ", 100)
	tests := []struct {
		name    string
		args    []string
		texts   []string
		wantErr string
	}{
		{"two texts", []string{"--truncate=false", "--context=77"}, []string{"a photo of a cat.", "a dog"}, ""},
		{"too long", []string{"--truncate=false", "--context=77"}, []string{"a cat", long}, `"photo photo`},
		{"truncated", []string{"--truncate", "--context=77"}, []string{long}, ""},
		{"short context", []string{"--truncate", "--context=4"}, []string{"a photo of a cat"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			rootCmd.SetOut(&out)
			rootCmd.SetArgs(append(append([]string{"tokenize", "--vocab", vocab}, tt.args...), tt.texts...))
			err := rootCmd.Execute()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "too long") {
					t.Fatalf("error %v, want one saying too long and naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(out.String(), `{"tokens": [[`) || !strings.HasSuffix(out.String(), "]]}\n") {
				t.Errorf("output %q is not {\"tokens\": [[...]]} on one line", out.String())
			}
			var got struct{ Tokens [][]int }
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("output %q: %v", out.String(), err)
			}
			ctx := tokenizer.ContextLength
			if tt.name == "short context" {
				ctx = 4
			}
			want, err := tok.TokenizeBatch(tt.texts, ctx, true)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Tokens) != len(want) {
				t.Fatalf("%d rows, want %d", len(got.Tokens), len(want))
			}
			for i := range want {
				if !slices.Equal(got.Tokens[i], want[i]) {
					t.Errorf("row %d = %v, want %v", i, got.Tokens[i], want[i])
				}
			}
		})
	}
}
