package config

import (
	"slices"
	"strings"
	"testing"
)

// TestTaskRoundTrip: the task a coordinator sends carries every setting
// that decides a run's numbers (the site reads back the same TaskSettings
// and, with its own model and data, the same fingerprint) and none of the
// site-local ones, which the site sets itself.
func TestTaskRoundTrip(t *testing.T) {
	e, err := Compose(Sources{Preset: "paper-base2novel", Sets: []string{"model=/coord/ViT-B-16.safetensors", "vocab=/coord/vocab.txt.gz",
		"dataset.root=/coord/DATA", "threads=7", "cache.memory_mib=123", "federation.rounds=9", "pfedmma.dim=16", "seeds=[4,5]", "name=hospitals"}})
	if err != nil {
		t.Fatal(err)
	}
	y, err := e.TaskYAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, local := range []string{"/coord/", "threads:", "cache:", "memory_mib", "vocab:", "\nmodel:"} {
		if strings.Contains(string(y), local) {
			t.Errorf("the task carries the site-local %q:\n%s", local, y)
		}
	}
	got, err := ParseTask("task", y, []string{"dataset.root=/site/DATA", "threads=2", "model=/site/clip.safetensors"})
	if err != nil {
		t.Fatalf("ParseTask: %v\n%s", err, y)
	}
	if a, b := e.TaskSettings(), got.TaskSettings(); !slices.Equal(a, b) || len(a) == 0 {
		t.Errorf("TaskSettings after the round trip:\n%v\nwant\n%v", b, a)
	}
	if got.Dataset.Root != "/site/DATA" || got.Threads != 2 || got.Model != "/site/clip.safetensors" || got.Vocab != "" || got.Cache.MemoryMiB == 123 {
		t.Errorf("site-local settings: root %q threads %d model %q vocab %q cache %d", got.Dataset.Root, got.Threads, got.Model, got.Vocab, got.Cache.MemoryMiB)
	}
	if got.Federation.Rounds != 9 || mmaOf(got).Dim != 16 || !slices.Equal(got.Seeds, []uint64{4, 5}) || got.Name != "hospitals" {
		t.Errorf("experiment settings lost: rounds %d dim %d seeds %v name %q", got.Federation.Rounds, mmaOf(got).Dim, got.Seeds, got.Name)
	}
	// the same model path on both sides: the same fingerprint
	e.Model, e.Vocab, e.Dataset.Root = got.Model, got.Vocab, got.Dataset.Root
	if e.Fingerprint() != got.Fingerprint() {
		t.Errorf("fingerprint %s after the round trip, %s before", got.Fingerprint(), e.Fingerprint())
	}
	for _, l := range e.TaskSettings() {
		if strings.HasPrefix(l, "model=") || strings.HasPrefix(l, "vocab=") {
			t.Errorf("TaskSettings holds the path %s", l)
		}
	}
}

// TestParseTaskErrors: a malformed task is refused with the file, the line
// and the key.
func TestParseTaskErrors(t *testing.T) {
	e, err := Compose(Sources{Preset: "paper-base2novel"})
	if err != nil {
		t.Fatal(err)
	}
	y, err := e.TaskYAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		data string
		sets []string
		want []string
	}{
		{"empty", "", nil, []string{"the coordinator's task", "empty"}},
		{"not YAML", "methods: [pfedmma\n", nil, []string{"the coordinator's task"}},
		{"wrong type", "federation:\n  rounds: many\n", nil, []string{"the coordinator's task", "federation.rounds"}},
		{"unknown key", "federation:\n  roundz: 3\n", nil, []string{"the coordinator's task", "roundz"}},
		{"out of range", "federation:\n  rounds: -1\n", nil, []string{"federation.rounds"}},
		{"no local root", string(y), nil, []string{"dataset.root"}},
	} {
		_, err := ParseTask("the coordinator's task", []byte(c.data), c.sets)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want it to name %q", c.name, err, w)
			}
		}
	}
}

func TestIsSiteLocal(t *testing.T) {
	for p, want := range map[string]bool{"threads": true, "cache.memory_mib": true, "dataset.root": true, "model": true,
		"dataset.name": false, "federation.rounds": false, "modelx": false, "pfedmma.dim": false} {
		if IsSiteLocal(p) != want {
			t.Errorf("IsSiteLocal(%q) = %v", p, !want)
		}
	}
}
