package config

import (
	"strings"
	"testing"
)

// TestClientDropRateKey: federation.client_drop_rate accepts [0, 1) and
// refuses the rest, a rate with secure aggregation and one that keeps none
// of the clients a round samples, each with an error naming the key; the
// defaults (0, and eval.personal false) leave the fingerprint as it was
// before the keys existed, and setting either changes it.
func TestClientDropRateKey(t *testing.T) {
	for _, c := range []struct {
		sets []string
		want string
	}{
		{[]string{"federation.client_drop_rate=1"}, "not in [0, 1)"},
		{[]string{"federation.client_drop_rate=-0.1"}, "not in [0, 1)"},
		{[]string{"federation.client_drop_rate=NaN"}, "NaN"},
		{[]string{"federation.client_drop_rate=0.2", "federation.secure_aggregation=true"}, "secure_aggregation"},
		// 10 clients at fraction 0.1 sample 1; ⌊0.5·1⌋ = 0 kept
		{[]string{"federation.client_drop_rate=0.5", "federation.fraction=0.1"}, "= 0 of the 1 clients"},
		{[]string{"federation.client_drop_rate=0.95"}, "= 0 of the 10 clients"},
	} {
		_, err := Compose(Sources{Sets: c.sets})
		if err == nil || !strings.Contains(err.Error(), "federation.client_drop_rate:") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %v: error %v, want one naming federation.client_drop_rate and %q", c.sets, err, c.want)
		}
	}
	e, err := Compose(Sources{Sets: []string{"federation.client_drop_rate=0.3", "eval.personal=true"}})
	if err != nil {
		t.Fatal(err)
	}
	if e.Federation.ClientDropRate != 0.3 || !e.Eval.Personal {
		t.Fatalf("client_drop_rate %v, personal %v", e.Federation.ClientDropRate, e.Eval.Personal)
	}
	for _, set := range []string{"federation.client_drop_rate=0.3", "eval.personal=true"} {
		one, err := Compose(Sources{Sets: []string{set}})
		if err != nil {
			t.Fatal(err)
		}
		if one.Fingerprint() == Default().Fingerprint() {
			t.Errorf("%s does not change the fingerprint", set)
		}
	}
	zero, err := Compose(Sources{Sets: []string{"federation.client_drop_rate=0", "eval.personal=false"}})
	if err != nil {
		t.Fatal(err)
	}
	if zero.Fingerprint() != Default().Fingerprint() {
		t.Fatal("the default client_drop_rate and personal change the fingerprint")
	}
}
