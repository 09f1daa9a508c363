package config

import (
	"strings"
	"testing"
)

// TestBadInputRefused: sizes that would exhaust memory and names that would
// escape runs/ are refused by validation with an error naming the key
// (issue 11: batch_size=1000000000 ran out of memory; name=../../x wrote
// outside runs/).
func TestBadInputRefused(t *testing.T) {
	cases := []struct{ set, path string }{
		{"batch_size=1000000000", "batch_size"},
		{"eval.batch_size=100000000", "eval.batch_size"},
		{"dataset.shots=1000000000", "dataset.shots"},
		{"dataset.image_size=100000", "dataset.image_size"},
		{"dataset.num_classes=100000000", "dataset.num_classes"},
		{"federation.clients=100000000", "federation.clients"},
		{"federation.rounds=1000000000", "federation.rounds"},
		{"federation.local_epochs=1000000000", "federation.local_epochs"},
		{"federation.eval_every=1000000000", "federation.eval_every"},
		{"protocol.min_samples=1000000000", "protocol.min_samples"},
		{"threads=1000000", "threads"},
		{"cache.memory_mib=1000000000000", "cache.memory_mib"},
		{"name=../../x", "name"},
		{"name=a/b", "name"},
		{"name=..", "name"},
		{`name=a\b`, "name"},
		{"name=-rf", "name"},
		{"name=" + strings.Repeat("x", 300), "name"},
	}
	for _, tc := range cases {
		_, err := Compose(Sources{Sets: []string{tc.set}})
		if err == nil {
			t.Errorf("--set %s: accepted", tc.set)
			continue
		}
		if !strings.Contains(err.Error(), tc.path+":") {
			t.Errorf("--set %s: error %q does not name %s", tc.set, err, tc.path)
		}
	}
	// The bounds leave every real setting alone.
	for _, set := range []string{"batch_size=512", "name=my-run_1.b", "protocol.min_samples=0",
		"dataset.shots=16", "federation.rounds=500", "cache.memory_mib=65536"} {
		if _, err := Compose(Sources{Sets: []string{set}}); err != nil {
			t.Errorf("--set %s: %v", set, err)
		}
	}
}
