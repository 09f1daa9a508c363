package config

import (
	"testing"
)

// TestDatasetSwitchDropsPresetDomains: choosing office_caltech10 on the
// paper-domainnet preset no longer keeps DomainNet's domains (which made
// the run fail until dataset.domains=[] was added); domains named with the
// new dataset are kept.
func TestDatasetSwitchDropsPresetDomains(t *testing.T) {
	e, err := Compose(Sources{Preset: "paper-domainnet", Sets: []string{"dataset.name=office_caltech10"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Dataset.Domains) != 0 {
		t.Errorf("office_caltech10 on paper-domainnet keeps domains %v", e.Dataset.Domains)
	}
	e, err = Compose(Sources{Preset: "paper-domainnet", Sets: []string{"dataset.name=office_caltech10", "dataset.domains=[amazon, dslr]", "federation.clients=0"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Dataset.Domains) != 2 || e.Dataset.Domains[0] != "amazon" {
		t.Errorf("explicit domains replaced: %v", e.Dataset.Domains)
	}
	yaml := []byte("dataset:\n  name: office_caltech10\n  root: DATA\n")
	e, err = Compose(Sources{Preset: "paper-domainnet", File: "x.yaml", Data: yaml})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Dataset.Domains) != 0 {
		t.Errorf("file choosing office_caltech10 keeps domains %v", e.Dataset.Domains)
	}
	e, err = Compose(Sources{Preset: "paper-domainnet"})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Dataset.Domains) != 6 {
		t.Errorf("paper-domainnet's own domains lost: %v", e.Dataset.Domains)
	}
}
