package config

import "testing"

type boundsSection struct {
	N    int     `yaml:"n"`
	LR   float64 `yaml:"lr"`
	Frac float64 `yaml:"frac"`
	WD   float64 `yaml:"wd"`
	Tr   float64 `yaml:"tr"`
}

func (s *boundsSection) Check(c *Checker) {
	c.AtLeast("n", s.N, 1)
	c.AtMost("n", s.N, 64)
	c.Positive("lr", s.LR)
	c.Positive("frac", s.Frac)
	c.Range("frac", s.Frac, 0, 1)
	c.NonNegative("wd", s.WD)
	c.Range("tr", s.Tr, 0, 1)
	c.Below("tr", s.Tr, 0.5)
}

// TestBounds: Bounds reports each numeric setting's documented range as
// its Check enforces it, the tighter bound winning.
func TestBounds(t *testing.T) {
	got := map[string]Bound{}
	for _, b := range Bounds(&boundsSection{N: 0, LR: -1}) {
		got[b.Path] = b
	}
	n, lr, fr, wd := got["n"], got["lr"], got["frac"], got["wd"]
	if tr := got["tr"]; *tr.Max != 0.5 || !tr.MaxOpen || fr.MaxOpen {
		t.Errorf("tr: %+v, frac %+v", tr, fr)
	}
	if len(got) != 5 || !n.Int || *n.Min != 1 || *n.Max != 64 || n.MinOpen {
		t.Errorf("n: %+v (all %v)", n, got)
	}
	if lr.Int || *lr.Min != 0 || !lr.MinOpen || lr.Max != nil {
		t.Errorf("lr: %+v", lr)
	}
	if *fr.Min != 0 || !fr.MinOpen || *fr.Max != 1 {
		t.Errorf("frac: %+v", fr)
	}
	if *wd.Min != 0 || wd.MinOpen || wd.Max != nil {
		t.Errorf("wd: %+v", wd)
	}
}
