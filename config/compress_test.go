package config

import (
	"strings"
	"testing"
)

func TestCompressKey(t *testing.T) {
	compose := func(sets ...string) (*Experiment, error) {
		return Compose(Sources{Preset: "world-base2novel", Sets: sets})
	}
	plain, err := compose()
	if err != nil {
		t.Fatal(err)
	}
	none, err := compose("federation.compress=none")
	if err != nil {
		t.Fatal(err)
	}
	if plain.Fingerprint() != none.Fingerprint() {
		t.Error("federation.compress=none changes the fingerprint: it is the same run as no key")
	}
	for _, c := range []string{"fp16", "int8"} {
		e, err := compose("federation.compress=" + c)
		if err != nil {
			t.Fatalf("federation.compress=%s: %v", c, err)
		}
		if e.Fingerprint() == plain.Fingerprint() {
			t.Errorf("federation.compress=%s keeps the uncompressed fingerprint", c)
		}
		if !strings.Contains(strings.Join(e.Settings(), "\n"), `federation.compress="`+c+`"`) {
			t.Errorf("federation.compress=%s missing from the settings a site compares", c)
		}
	}
	_, err = compose("federation.compress=int8", "federation.secure_aggregation=true")
	if err == nil || !strings.Contains(err.Error(), "federation.compress") || !strings.Contains(err.Error(), "secure_aggregation") {
		t.Errorf("int8 with secure aggregation: %v, want a refusal naming both keys", err)
	}
	if _, err := compose("federation.compress=none", "federation.secure_aggregation=true"); err != nil {
		t.Errorf("no compression with secure aggregation: %v", err)
	}
	_, err = compose("federation.compress=int4")
	if err == nil || !strings.Contains(err.Error(), "federation.compress") || !strings.Contains(err.Error(), "int4") {
		t.Errorf("federation.compress=int4: %v, want a refusal naming the key and the value", err)
	}
}
