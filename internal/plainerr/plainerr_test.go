package plainerr

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// TestPlainMessage rewrites the real errors of Go's decoders (produced
// here by encoding/json and strconv, not written by hand) into words for
// the file's author, keeping the wrapping's file and key.
func TestPlainMessage(t *testing.T) {
	var named plainRecord
	var rec struct {
		Round int `json:"round"`
		Mean  struct {
			Acc float64 `json:"acc"`
		} `json:"mean"`
	}
	var f float64
	var m map[string]float64
	_, perr := strconv.ParseFloat("x", 64)
	_, ierr := strconv.Atoi("99999999999999999999")
	for _, c := range []struct {
		err   error
		wants []string
	}{
		{json.Unmarshal([]byte(`{"round": "x"}`), &named), []string{`field "round": a JSON string where a whole number is expected`}},
		{json.Unmarshal([]byte(`{"round": "x"}`), &rec), []string{`field "round": a JSON string where a whole number is expected`}},
		{json.Unmarshal([]byte(`{"mean": {"acc": "x"}}`), &rec), []string{`field "mean.acc": a JSON string where a number is expected`}},
		{json.Unmarshal([]byte(`"x"`), &f), []string{"a JSON string where a number is expected"}},
		{json.Unmarshal([]byte(`[1]`), &m), []string{"a JSON array where an object is expected"}},
		{perr, []string{`"x" is not a number`}},
		{ierr, []string{`"99999999999999999999" is out of range for a whole number`}},
	} {
		if c.err == nil {
			t.Fatal("no error to rewrite")
		}
		msg := Message("summary S: methods: " + c.err.Error())
		for _, w := range append(c.wants, "summary S: methods: ") {
			if !strings.Contains(msg, w) {
				t.Errorf("%q → %q, want %q", c.err, msg, w)
			}
		}
		for _, bad := range []string{"Go value", "Go struct", "strconv", "json:"} {
			if strings.Contains(msg, bad) {
				t.Errorf("%q → %q still says %q", c.err, msg, bad)
			}
		}
	}
	if got := Message("run: --out x is not empty"); got != "run: --out x is not empty" {
		t.Errorf("an ordinary message changed: %q", got)
	}
}

// plainRecord is a named struct: Go's message then says
// "plainRecord.round".
type plainRecord struct {
	Round int `json:"round"`
}
