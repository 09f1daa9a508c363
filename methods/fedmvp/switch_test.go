package fedmvp

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/parity"
)

// TestSwitchingRoundFreezesCrossAttention: in the round in which a client
// switches to LoRA (its last batch's loss below lora_threshold), the
// authors' client.py freezes the cross-attention between that batch's
// forward and its backward, so with one batch a round (the fixture's) its
// update that round is exactly 0; the LoRA factors, outside that forward,
// stay too; the linear map takes the same step as without the switch
// (round.safetensors's, the authors' round in which neither client
// switches). The server averages what it gets: the global cross-attention
// is the initial one.
func TestSwitchingRoundFreezesCrossAttention(t *testing.T) {
	m := tinyModel(t)
	// both losses (4.6, 5.2) below the threshold: both clients switch
	f, err := parity.Load(m, td+"init.safetensors", []string{td + "round.safetensors"}, []string{"lora_threshold=10"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := parity.RunRound(context.Background(), Method{}, f)
	if err != nil {
		t.Fatal(err)
	}
	frozen, linear := 0, 0
	for _, prefix := range []string{"client0.trained.", "client1.trained.", "global."} {
		for _, p := range slices.Sorted(maps.Keys(f.Params)) {
			got := out[prefix+p]
			if got == nil {
				t.Fatalf("the round produced no %s%s", prefix, p)
			}
			switch {
			case !Trained(p, false) || !Trained(p, true): // cross-attention, LoRA
				if !slices.Equal(got.Data, f.Params[p].Data) {
					t.Errorf("%s%s moved in the switching round", prefix, p)
				}
				frozen++
			case strings.HasPrefix(p, "prompt_learner.linear."):
				rel(t, prefix+p, got, f.Batch[prefix+p], 1e-4)
				linear++
			default:
				t.Fatalf("%s: neither cross-attention, LoRA nor the linear map", p)
			}
		}
	}
	if frozen < 3*15 || linear != 3*2 {
		t.Fatalf("checked %d frozen and %d linear tensors", frozen, linear)
	}
}
