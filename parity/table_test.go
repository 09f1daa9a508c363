package parity_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/methods"
	_ "github.com/pfedmma/pfedmma/methods/all"
	"github.com/pfedmma/pfedmma/parity"
	"github.com/pfedmma/pfedmma/tensor"
)

// TestTableEntries: every method of the table is registered, trains, keeps
// no fixture hook of its own (the table would hide it), lists among its
// Keys every metadata key its Meta reads, and names in Fixed, Meta, Dims
// and Present only keys of its settings — each set to its default value
// decodes, and an unknown key is refused naming it.
func TestTableEntries(t *testing.T) {
	for name, e := range parity.TableEntries() {
		meth, err := methods.Get(name)
		if err != nil {
			t.Errorf("table entry %q: %v", name, err)
			continue
		}
		if _, ok := meth.(parity.Stepper); ok {
			t.Errorf("%s has a table entry and its own Stepper", name)
		}
		if _, ok := meth.(parity.Settings); ok {
			t.Errorf("%s has a table entry and its own Settings", name)
		}
		for k := range e.Meta {
			if !slices.Contains(e.Keys, k) {
				t.Errorf("%s: metadata key %q is read (Meta) but not in Keys", name, k)
			}
		}
		var keys []string
		for _, kv := range e.Fixed {
			keys = append(keys, kv[0])
		}
		for _, k := range e.Meta {
			keys = append(keys, k)
		}
		for _, d := range e.Dims {
			keys = append(keys, d.Key)
		}
		for _, p := range e.Present {
			keys = append(keys, p.Key)
		}
		x := &config.Experiment{Sections: map[string]config.Section{name: meth.DefaultConfig()}}
		for _, k := range keys {
			if err := x.Set(name+"."+k, "{}"); err != nil && strings.Contains(err.Error(), "unknown") {
				t.Errorf("%s: settings key %q: %v", name, k, err)
			}
		}
	}
}

// TestTabledSettingsRefuseUnknownKey: an Entry whose Meta names a settings
// key the method does not have fails its SettingsFrom naming the key.
func TestTabledSettingsRefuseUnknownKey(t *testing.T) {
	meth, err := methods.Get("clip_lora")
	if err != nil {
		t.Fatal(err)
	}
	tb := parity.Tabled(meth, parity.Entry{Meta: map[string]string{"alpha": "alpha_typo"}})
	_, err = tb.SettingsFrom(&parity.Fixture{Meta: map[string]string{"alpha": "2"}, Params: tensor.Named{}})
	if err == nil || !strings.Contains(err.Error(), "alpha_typo") {
		t.Errorf("error %v, want one naming alpha_typo", err)
	}
}
