package prograd

import (
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/clip"
)

// TestCtxInitLastRows: ctx_init fills the last context rows with the
// words' token embeddings and leaves the rows before them zero (the
// authors' CTX_INIT with n_ctx above the word count); more tokens than
// n_ctx is refused, naming ctx_init.
func TestCtxInitLastRows(t *testing.T) {
	w, tok, err := assets.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	m := clip.New(w)
	D := w.Config.Text.Width
	ids := tok.Encode("a photo of a")
	s := &Settings{NCtx: len(ids) + 2, CtxInit: "a photo of a", InitStd: 0.02, T: 1, Lambda: 1}
	cfg, err := s.config(m, tok, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.InitCtx) != s.NCtx*D {
		t.Fatalf("init has %d values, want %d × %d", len(cfg.InitCtx), s.NCtx, D)
	}
	for i, v := range cfg.InitCtx[:2*D] {
		if v != 0 {
			t.Fatalf("row %d is not zero: %v", i/D, v)
		}
	}
	for j, id := range ids {
		row := cfg.InitCtx[(2+j)*D : (3+j)*D]
		if !slices.Equal(row, m.Text.W.TokenEmb[id*D:(id+1)*D]) {
			t.Errorf("row %d is not token %d's embedding", 2+j, id)
		}
	}
	s.NCtx = len(ids) - 1
	if _, err := s.config(m, tok, 1); err == nil || !strings.Contains(err.Error(), "ctx_init") {
		t.Errorf("n_ctx %d below the %d words' tokens: error %v", s.NCtx, len(ids), err)
	}
}
