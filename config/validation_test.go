package config

import (
	"strings"
	"testing"
)

// TestValidationKey: protocol.validation accepts [0, 1) and refuses the rest
// with an error naming the key; 0 (the default) leaves the fingerprint as it
// was before the key existed.
func TestValidationKey(t *testing.T) {
	for _, v := range []string{"1", "1.5", "-0.1", "NaN", "Inf"} {
		_, err := Compose(Sources{Sets: []string{"protocol.validation=" + v}})
		if err == nil || !strings.Contains(err.Error(), "protocol.validation:") {
			t.Errorf("--set protocol.validation=%s: error %v, want one naming protocol.validation", v, err)
		}
	}
	e, err := Compose(Sources{Sets: []string{"protocol.validation=0.2"}})
	if err != nil {
		t.Fatal(err)
	}
	if e.Protocol.Validation != 0.2 {
		t.Fatalf("protocol.validation = %v, want 0.2", e.Protocol.Validation)
	}
	if e.Fingerprint() == Default().Fingerprint() {
		t.Fatal("protocol.validation does not change the fingerprint")
	}
	if Default().Protocol.Validation != 0 {
		t.Fatalf("default protocol.validation %v, want 0", Default().Protocol.Validation)
	}
	zero, err := Compose(Sources{Sets: []string{"protocol.validation=0"}})
	if err != nil {
		t.Fatal(err)
	}
	if zero.Fingerprint() != Default().Fingerprint() {
		t.Fatal("protocol.validation=0 changes the fingerprint")
	}
}
