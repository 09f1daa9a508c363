package conformance

import (
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestClassTokenPositions: the CoOp-style prompt methods with CoOp's
// class-token positions train, evaluate and predict with the class name in
// the middle of the context (the fixtures, testdata/coop-positions, check
// the values): the tiny world run with <method>.class_token_position=middle
// completes every round, and `pfedmma predict` rebuilt from each site's
// saved tensors gives the evaluation's logits bit for bit.
func TestClassTokenPositions(t *testing.T) {
	skipPureGo(t)
	for _, name := range []string{"promptfl", "fedpgp", "fedotp", "pfedmoap"} {
		t.Run(name, func(t *testing.T) {
			e := worldConfig(t, name, name+".class_token_position=middle")
			dir, err := os.MkdirTemp("", "conformance-position-"+name+"-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			r := &reference{name: name, logits: newEvalLogits(), o: options(t, e, dir)}
			sec, err := yaml.Marshal(r.o.Sections[name])
			if err != nil || !strings.Contains(string(sec), "class_token_position: middle") {
				t.Fatalf("the run's %s section does not hold the position (%v):\n%s", name, err, sec)
			}
			if r.res, err = simulate(t, r.o, -1, r.logits); err != nil {
				t.Fatalf("the tiny world run with the class name in the middle: %v", err)
			}
			if len(r.res.Records) != numRounds {
				t.Fatalf("%d evaluated rounds, want %d", len(r.res.Records), numRounds)
			}
			r.oc = simOutcome(t, r.o, name, r.res)
			checkPredict(t, name, r)
		})
	}
}
