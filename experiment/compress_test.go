package experiment

import (
	"context"
	"math"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/compress"
	"github.com/pfedmma/pfedmma/config"
)

// int8Guard is how many points int8 compression may cost (or give) on
// any metric of the guarded job; the README's measurements are within it.
const int8Guard = 1.5

// TestInt8GuardWorld: the default world job (pFedMMA, 3 rounds) with
// federation.compress=int8 stays within int8Guard points of the
// uncompressed run on Local, Base, Novel and HM, reports the int8 bytes
// (4 bytes per block of 64 values plus one per value), and is not the
// uncompressed run (the encoding is applied).
func TestInt8GuardWorld(t *testing.T) {
	model, err := assets.DefaultModelDir()
	if err != nil {
		t.Fatal(err)
	}
	run := func(codec string) *Result {
		t.Helper()
		e, err := config.Compose(config.Sources{Preset: "world-base2novel",
			Sets: []string{"methods=[pfedmma]", "federation.rounds=3", "federation.compress=" + codec}})
		if err != nil {
			t.Fatal(err)
		}
		o, err := FromConfig(e, model, e.Seed, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(context.Background(), o)
		if err != nil {
			t.Fatalf("federation.compress=%s: %v", codec, err)
		}
		return res
	}
	plain, q := run("none"), run("int8")
	pm, _ := plain.Summary.Get(PFedMMA)
	qm, _ := q.Summary.Get(PFedMMA)
	t.Logf("none %v\nint8 %v", pm, qm)
	for _, k := range []string{"local", "base", "novel", "hm"} {
		if d := math.Abs(qm[k] - pm[k]); !(d <= int8Guard) {
			t.Errorf("%s: int8 %.2f, none %.2f: %.2f points apart, guard %.1f", k, qm[k], pm[k], d, int8Guard)
		}
	}
	bytes := func(r *Result) float64 {
		return r.Summary.Extra["update_bytes_per_round_per_site"].(map[string]float64)[PFedMMA]
	}
	values := bytes(plain) / 4 // float32 values uploaded per round per site
	if want := float64(compress.Int8.Size(int(values))); values < 1 || bytes(q) > want || bytes(q) < values {
		t.Errorf("int8 update bytes per round per site %v; %v float32 values take %v encoded at most", bytes(q), values, want)
	}
	same := true
	for i, r := range plain.Records {
		if r.Mean["loss"] != q.Records[i].Mean["loss"] {
			same = false
		}
	}
	if same {
		t.Error("int8 gave the uncompressed run's losses in every round: not applied")
	}
}
