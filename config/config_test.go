package config

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestPresetsValidate(t *testing.T) {
	names := PresetNames()
	for _, want := range []string{"paper-base2novel", "paper-cifar", "paper-domainnet", "reference-code",
		"world-base2novel", "world-dirichlet", "world-domains", "fashion-mnist"} {
		if !slices.Contains(names, want) {
			t.Errorf("PresetNames() = %v, missing %q", names, want)
		}
	}
	if len(Presets()) != len(names) {
		t.Errorf("Presets() has %d entries, PresetNames() %d", len(Presets()), len(names))
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			e, err := Preset(name)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Validate(); err != nil {
				t.Fatalf("preset does not validate: %v", err)
			}
			if e.Name != name {
				t.Errorf("Name = %q, want %q", e.Name, name)
			}
			// Every call returns a fresh copy.
			e.Methods[0] = "mutated"
			e.Federation.Rounds = 999
			f, _ := Preset(name)
			if f.Methods[0] == "mutated" || f.Federation.Rounds == 999 {
				t.Errorf("Preset(%q) shares state between calls", name)
			}
		})
	}
	if _, err := Preset("no-such"); err == nil || !strings.Contains(err.Error(), "world-base2novel") {
		t.Errorf("Preset(no-such) error = %v, want one listing the presets", err)
	}
}

// TestPaperPresets checks the numbers of pfedmma.md §2 and the documented
// difference of reference-code.
func TestPaperPresets(t *testing.T) {
	get := func(name string) *Experiment {
		e, err := Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	b2n, cifar, dn, ref := get("paper-base2novel"), get("paper-cifar"), get("paper-domainnet"), get("reference-code")
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"b2n federation", b2n.Federation, Federation{Clients: 10, Fraction: 1, Rounds: 50, LocalEpochs: 2, EvalEvery: 5}},
		{"b2n optimizer", [4]any{b2n.Optimizer.Name, b2n.Optimizer.LR, b2n.Optimizer.Momentum, b2n.Optimizer.WeightDecay}, [4]any{"sgd", 0.001, 0.9, 5e-4}},
		{"b2n batch", b2n.BatchSize, 32},
		{"b2n adapters", *mmaOf(b2n), testMMA{Start: 10, End: 0, Dim: 32, Scale: 0.005, Activation: "relu", CacheBlockOutput: true}},
		{"b2n shots", b2n.Dataset.Shots, 16},
		{"b2n protocol", b2n.Protocol.Name, ProtocolBaseToNovel},
		{"b2n seeds", b2n.RunSeeds(), []uint64{1, 2, 3}},
		{"cifar federation", [4]any{cifar.Federation.Clients, cifar.Federation.Fraction, cifar.Federation.LocalEpochs, cifar.Federation.Rounds}, [4]any{100, 0.1, 1, 50}},
		{"cifar protocol", [2]any{cifar.Protocol.Name, cifar.Protocol.Beta}, [2]any{ProtocolDirichlet, 0.5}},
		{"cifar start", [2]any{mmaOf(cifar).Start, mmaOf(cifar).CacheBlockOutput}, [2]any{5, false}},
		{"domainnet protocol", [2]any{dn.Protocol.Name, dn.NumClients(len(dn.Dataset.Domains))}, [2]any{ProtocolDomains, 12}},
		{"domainnet domains", len(dn.Dataset.Domains), 6},
		{"domainnet start", [2]any{mmaOf(dn).Start, mmaOf(dn).CacheBlockOutput}, [2]any{5, false}},
		{"reference adapters", [2]any{mmaOf(ref).Start, mmaOf(ref).Scale}, [2]any{5, 0.001}},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	// reference-code differs from paper-base2novel only in the adapters.
	r := ref.Clone()
	r.Name = b2n.Name
	*mmaOf(r) = *mmaOf(b2n)
	if !reflect.DeepEqual(r, b2n) {
		t.Errorf("reference-code differs from paper-base2novel beyond pfedmma.start/scale")
	}
}

func TestExample(t *testing.T) {
	data, err := os.ReadFile("example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(Example(), data) {
		t.Fatal("Example() differs from example.yaml")
	}
	e, err := Load("example.yaml")
	if err != nil {
		t.Fatalf("example.yaml: %v", err)
	}
	// It documents the default preset's values.
	got, _ := e.Resolved()
	want, _ := Default().Resolved()
	if !bytes.Equal(got, want) {
		t.Errorf("example.yaml resolves to\n%s\nthe default preset to\n%s", got, want)
	}
	// It sets every field.
	lines, err := Default().decodeFile("example.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	paths := leafPaths(reflect.TypeFor[Experiment](), "")
	for name, sec := range Default().Sections {
		paths = append(paths, leafPaths(reflect.TypeOf(sec).Elem(), name)...)
	}
	for _, p := range paths {
		if lines[p] == 0 {
			t.Errorf("example.yaml does not set %s", p)
		}
	}
}

// leafPaths lists the YAML paths of every leaf field of t.
func leafPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if yamlName(f) == "" {
			continue
		}
		p := joinPath(prefix, yamlName(f))
		if f.Type.Kind() == reflect.Struct && !isLeafType(f.Type) {
			out = append(out, leafPaths(f.Type, p)...)
		} else {
			out = append(out, p)
		}
	}
	return out
}

func TestLoadErrors(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		want       []string // substrings of the error
	}{
		{"unknown top-level", "methods: [pfedmma]\nrouns: 3\n", []string{"exp.yaml: line 2: rouns: unknown field"}},
		{"unknown nested", "federation:\n  rouns: 3\n", []string{`exp.yaml: line 2: federation.rouns: unknown field; did you mean "rounds"`}},
		{"wrong type", "federation:\n  rounds: many\n", []string{`exp.yaml: line 2: federation.rounds: cannot use "many" as an integer`}},
		{"float into int", "batch_size: 1.5\n", []string{"line 1: batch_size: cannot use 1.5 as an integer"}},
		{"null number", "batch_size:\n", []string{"line 1: batch_size: no value"}},
		{"negative seed", "seed: -1\n", []string{"line 1: seed: cannot use -1 as a non-negative integer"}},
		{"bool", "output:\n  plots: maybe\n", []string{`line 2: output.plots: cannot use "maybe" as true or false`}},
		{"fraction out of range", "name: x\nmethods: [pfedmma]\ndataset:\n  name: world\nprotocol:\n  name: base2novel\nfederation:\n  fraction: 1.5\n",
			[]string{"exp.yaml: line 8: federation.fraction: 1.5 not in (0, 1]"}},
		{"zero rounds", "federation: {rounds: 0}\n", []string{"line 1: federation.rounds: 0 is below 1"}},
		{"bad augment", "augment: crops\n", []string{`line 1: augment: augment "crops": want none, views:K or online`}},
		{"bad views", "augment: views:0\n", []string{"line 1: augment:", "views:K"}},
		{"augment not a string", "augment: 3\n", []string{"line 1: augment: want a string"}},
		{"duplicate key", "seed: 1\nseed: 2\n", []string{"line 2: seed: set twice (first at line 1)"}},
		{"unknown method", "methods: [zeroshot, fedfoo]\n", []string{`line 1: methods[1]: unknown method "fedfoo"`}},
		{"method twice", "methods:\n  - pfedmma\n  - pfedmma\n", []string{`line 3: methods[1]: "pfedmma" listed twice`}},
		{"list wanted", "methods: pfedmma\n", []string{`line 1: methods: want a list such as [a, b], got "pfedmma"`}},
		{"mapping wanted", "federation: 3\n", []string{"line 1: federation: want a mapping of clients, fraction"}},
		{"top level not mapping", "- a\n- b\n", []string{"exp.yaml: line 1: want a mapping of settings"}},
		{"syntax", "federation: [\n", []string{"exp.yaml: "}},
		{"two documents", "seed: 1\n---\nseed: 2\n", []string{"exp.yaml: line 2: a second YAML document"}},
		{"merge key", "federation:\n  <<: {rounds: 3}\n", []string{"line 2: federation.<<: unknown field"}},
		{"dirichlet beta", "protocol:\n  name: dirichlet\n  beta: 0\n", []string{"line 3: protocol.beta: 0 must be > 0"}},
		{"bad protocol", "protocol: {name: iid}\n", []string{`line 1: protocol.name: "iid": want base2novel, dirichlet, domains, pathological, natural, leave_one_domain_out or domain_generalization`}},
		{"domains mismatch", "dataset: {name: world, domains: [photo, sketch]}\nprotocol: {name: domains, clients_per_domain: 2}\nfederation: {clients: 5}\n",
			[]string{"line 3: federation.clients: 5, but 2 domains × clients_per_domain 2 = 4"}},
		{"preset value clashes", "protocol: {name: domains, clients_per_domain: 3}\n",
			[]string{"exp.yaml: federation.clients: 10 is not a multiple of clients_per_domain 3", "(value from preset world-base2novel)"}},
		{"root needed", "dataset: {name: cifar10}\n", []string{"exp.yaml: dataset.root: missing: dataset cifar10 needs", "(value from preset world-base2novel)"}},
		{"nan", "pfedmma: {scale: .nan}\n", []string{"line 1: pfedmma.scale: NaN is not a finite number"}},
		{"start after end", "pfedmma: {start: 4, end: 2}\n", []string{"line 1: pfedmma.start: block 4 is after end block 2"}},
		{"domain element", "dataset:\n  domains:\n    - photo\n    - photo\n", []string{`line 4: dataset.domains[1]: "photo" listed twice`}},
		{"warmup", "optimizer: {warmup_epochs: 2}\n", []string{"line 1: optimizer.warmup_epochs: 2 needs schedule: cosine"}},
		{"two problems", "batch_size: 0\nthreads: -1\n", []string{"line 1: batch_size: 0 is below 1", "line 2: threads: -1 is below 0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Compose(Sources{File: "exp.yaml", Data: []byte(c.yaml)})
			if err == nil {
				t.Fatalf("no error for\n%s", c.yaml)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

func TestErrInvalid(t *testing.T) {
	_, err := Compose(Sources{File: "exp.yaml", Data: []byte("federation: {fraction: 2}\n")})
	var fe *FieldError
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &fe) {
		t.Fatalf("error %v is not an ErrInvalid *FieldError", err)
	}
	if fe.File != "exp.yaml" || fe.Line != 1 || fe.Path != "federation.fraction" {
		t.Errorf("FieldError = %+v, want exp.yaml line 1 federation.fraction", fe)
	}
	if _, err := Load("does-not-exist.yaml"); err == nil || !strings.Contains(err.Error(), "does-not-exist.yaml") {
		t.Errorf("missing file error = %v, want the file named", err)
	}
}

func TestOverrides(t *testing.T) {
	file := []byte(`
methods: [pfedmma]
federation:
  rounds: 7
  eval_every: &k 3
optimizer: {lr: 0.02}
threads: *k
augment: views:4
`)
	e, err := Compose(Sources{Preset: "paper-cifar", File: "exp.yaml", Data: file,
		Sets: []string{"optimizer.lr=0.05", "pfedmma.scale=0.01", "seeds=[4, 5]", "model="}})
	if err != nil {
		t.Fatal(err)
	}
	base, _ := Preset("paper-cifar")
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"methods (file replaces the list)", e.Methods, []string{"pfedmma"}},
		{"rounds (file)", e.Federation.Rounds, 7},
		{"eval_every (file, anchor)", e.Federation.EvalEvery, 3},
		{"threads (file, alias)", e.Threads, 3},
		{"clients (preset, same section)", e.Federation.Clients, base.Federation.Clients},
		{"fraction (preset)", e.Federation.Fraction, base.Federation.Fraction},
		{"momentum (preset)", e.Optimizer.Momentum, base.Optimizer.Momentum},
		{"lr (set beats file)", e.Optimizer.LR, 0.05},
		{"scale (set)", mmaOf(e).Scale, 0.01},
		{"start (preset)", mmaOf(e).Start, 5},
		{"augment (file)", e.Augment, Augment{Mode: AugmentViews, Views: 4}},
		{"seeds (set)", e.RunSeeds(), []uint64{4, 5}},
		{"model (set cleared)", e.Model, ""},
		{"dataset (preset)", e.Dataset.Name, "cifar10"},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestSet(t *testing.T) {
	for _, c := range []struct {
		path, value string
		check       func(*Experiment) bool
	}{
		{"federation.rounds", "3", func(e *Experiment) bool { return e.Federation.Rounds == 3 }},
		{"federation", "{rounds: 4}", func(e *Experiment) bool { return e.Federation.Rounds == 4 && e.Federation.Clients == 10 }},
		{"augment", "online", func(e *Experiment) bool { return e.Augment.Mode == AugmentOnline }},
		{"methods", "[pfedmma, promptfl]", func(e *Experiment) bool { return slices.Equal(e.Methods, []string{"pfedmma", "promptfl"}) }},
		{"dataset.domains", "", func(e *Experiment) bool { return e.Dataset.Domains == nil }},
		{"output.plots", "false", func(e *Experiment) bool { return !e.Output.Plots }},
		{"dataset.root", "2024", func(e *Experiment) bool { return e.Dataset.Root == "2024" }},
	} {
		e := Default()
		if err := e.Set(c.path, c.value); err != nil {
			t.Errorf("Set(%s, %q): %v", c.path, c.value, err)
			continue
		}
		if !c.check(e) {
			t.Errorf("Set(%s, %q) did not take effect", c.path, c.value)
		}
	}
	for _, c := range []struct{ path, value, want string }{
		{"federation.rouns", "3", `federation.rouns: unknown field; did you mean "rounds"`},
		{"federation.rounds", "x", `federation.rounds: cannot use "x" as an integer (value from --set federation.rounds=x)`},
		{"federation.rounds", "", "no value"},
		{"augment.mode", "x", `"augment" is not a section`},
		{"batch_size.x", "1", `"batch_size" is not a section`},
		{"federation", "{clients: 2, bogus: 1}", "federation.bogus: unknown field"},
		{"methods", "[a, {b: 1}]", "methods[1]: want a string, got a mapping"},
		{"seed", "[1", "seed: value:"},
	} {
		e := Default()
		before, _ := e.Resolved()
		err := e.Set(c.path, c.value)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Set(%s, %q) error = %v, want %q", c.path, c.value, err, c.want)
		}
		if after, _ := e.Resolved(); !bytes.Equal(before, after) {
			t.Errorf("failed Set(%s, %q) changed the experiment", c.path, c.value)
		}
	}
	// An override that breaks a range is reported as coming from --set.
	_, err := Compose(Sources{Sets: []string{"federation.fraction=0"}})
	if err == nil || !strings.Contains(err.Error(), "federation.fraction: 0 not in (0, 1] (value from --set federation.fraction=0)") {
		t.Errorf("Compose with bad --set: %v", err)
	}
}

func TestParseSet(t *testing.T) {
	for _, c := range []struct {
		in, path, value string
		ok              bool
	}{
		{"federation.rounds=3", "federation.rounds", "3", true},
		{"prompt=a=b {}", "prompt", "a=b {}", true},
		{" model =", "model", "", true},
		{"rounds", "", "", false},
		{"=3", "", "", false},
	} {
		p, v, err := ParseSet(c.in)
		if (err == nil) != c.ok || p != c.path || v != c.value {
			t.Errorf("ParseSet(%q) = %q, %q, %v", c.in, p, v, err)
		}
	}
}

func TestResolvedRoundTrip(t *testing.T) {
	for _, name := range PresetNames() {
		e, _ := Preset(name)
		e.Augment = Augment{Mode: AugmentViews, Views: 3}
		e.Seeds = nil
		e.Seed = 1<<63 + 5 // beyond int64
		e.Optimizer.LR = 1.0 / 3
		out, err := e.Resolved()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(out, []byte("# fingerprint: "+e.Fingerprint())) {
			t.Errorf("%s: resolved YAML lacks its fingerprint header", name)
		}
		// Loading it onto any preset gives the same experiment back.
		for _, base := range []string{DefaultPreset, "paper-domainnet"} {
			back, err := Compose(Sources{Preset: base, File: "resolved.yaml", Data: out})
			if err != nil {
				t.Fatalf("%s on %s: %v\n%s", name, base, err, out)
			}
			if back.Fingerprint() != e.Fingerprint() {
				t.Errorf("%s on %s: fingerprint changed through Resolved", name, base)
			}
			again, _ := back.Resolved()
			if !bytes.Equal(again, out) {
				t.Errorf("%s on %s: Resolved not stable:\n%s\nvs\n%s", name, base, out, again)
			}
			if back.Optimizer.LR != e.Optimizer.LR || back.Seed != e.Seed {
				t.Errorf("%s: lr %v seed %d, want %v %d", name, back.Optimizer.LR, back.Seed, e.Optimizer.LR, e.Seed)
			}
		}
	}
}

func TestFingerprint(t *testing.T) {
	fp := Default().Fingerprint()
	if len(fp) != 64 || fp != Default().Fingerprint() {
		t.Fatalf("Fingerprint %q is not a stable 64-digit hash", fp)
	}
	seen := map[string]string{}
	for _, name := range PresetNames() {
		if name == "world-compare-shared" {
			continue // world-compare without the recipes of methods these tests register with no section (go test ./experiment -run Recipes)
		}
		e, _ := Preset(name)
		f := e.Fingerprint()
		if other, dup := seen[f]; dup {
			t.Errorf("presets %s and %s share a fingerprint", name, other)
		}
		seen[f] = name
	}
	for _, c := range []struct {
		name    string
		edit    func(*Experiment)
		changes bool
	}{
		{"rounds", func(e *Experiment) { e.Federation.Rounds++ }, true},
		{"lr", func(e *Experiment) { e.Optimizer.LR *= 2 }, true},
		{"method order", func(e *Experiment) { slices.Reverse(e.Methods) }, true},
		{"augment", func(e *Experiment) { e.Augment = Augment{Mode: AugmentViews, Views: 2} }, true},
		{"seed", func(e *Experiment) { e.Seed++ }, true},
		{"domains", func(e *Experiment) { e.Dataset.Domains = []string{"photo"} }, true},
		{"name", func(e *Experiment) { e.Name = "other" }, false},
		{"threads", func(e *Experiment) { e.Threads = 7 }, false},
		{"cache", func(e *Experiment) { e.Cache = Cache{MemoryMiB: 64, SpillDir: "/x", DType: DTypeBFloat16} }, false},
		{"output", func(e *Experiment) { e.Output = Output{} }, false},
		{"empty vs nil list", func(e *Experiment) { e.Seeds = []uint64{} }, false},
	} {
		e := Default()
		c.edit(e)
		if got := e.Fingerprint() != fp; got != c.changes {
			t.Errorf("%s: fingerprint changed = %v, want %v", c.name, got, c.changes)
		}
	}
	// seed is ignored once seeds is set.
	a, b := Default(), Default()
	a.Seeds, b.Seeds = []uint64{1, 2}, []uint64{1, 2}
	b.Seed = 99
	if a.Fingerprint() != b.Fingerprint() {
		t.Error("seed changes the fingerprint although seeds is set")
	}
}

func TestAugment(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Augment
		ok   bool
	}{
		{"none", Augment{Mode: AugmentNone}, true},
		{"online", Augment{Mode: AugmentOnline}, true},
		{"views:1", Augment{Mode: AugmentViews, Views: 1}, true},
		{" views: 8 ", Augment{Mode: AugmentViews, Views: 8}, true},
		{"views:0", Augment{}, false},
		{"views:-2", Augment{}, false},
		{"views:2000", Augment{}, false},
		{"views", Augment{}, false},
		{"views:x", Augment{}, false},
		{"", Augment{}, false},
		{"Online", Augment{}, false},
	} {
		got, err := ParseAugment(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseAugment(%q) = %+v, %v", c.in, got, err)
			continue
		}
		if c.ok {
			if back, err := ParseAugment(got.String()); err != nil || back != got {
				t.Errorf("String %q does not parse back: %+v %v", got.String(), back, err)
			}
		}
	}
	e := Default()
	e.Augment = Augment{Mode: AugmentOnline, Views: 3}
	if err := e.Validate(); err == nil || !strings.Contains(err.Error(), "augment") {
		t.Errorf("views count with mode online validated: %v", err)
	}
}

func TestNumClients(t *testing.T) {
	e := Default()
	e.Protocol = Protocol{Name: ProtocolDomains, Beta: 0.5, ClientsPerDomain: 2}
	e.Federation.Clients = 0
	if err := e.Validate(); err != nil {
		t.Fatalf("domains with derived clients: %v", err)
	}
	if n := e.NumClients(6); n != 12 {
		t.Errorf("NumClients(6) = %d, want 12", n)
	}
	e.Protocol.Name = ProtocolDirichlet
	if err := e.Validate(); err == nil || !strings.Contains(err.Error(), "federation.clients") {
		t.Errorf("dirichlet with 0 clients validated: %v", err)
	}
}

func TestEmptyFile(t *testing.T) {
	for _, data := range []string{"", "# only a comment\n", "---\n"} {
		e, err := Compose(Sources{File: "exp.yaml", Data: []byte(data)})
		if err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		if e.Fingerprint() != Default().Fingerprint() {
			t.Errorf("%q changed the default preset", data)
		}
	}
}

func FuzzCompose(f *testing.F) {
	f.Add(Example())
	f.Add([]byte("federation: {rounds: 3}\naugment: views:2\n"))
	f.Add([]byte("methods: [a\n"))
	f.Add([]byte("seed: &a 1\nthreads: *a\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := Compose(Sources{File: "fuzz.yaml", Data: data})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.yaml") && !strings.Contains(err.Error(), "(value from preset") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("Compose accepted an invalid config: %v", err)
		}
		out, err := e.Resolved()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Compose(Sources{File: "resolved.yaml", Data: out})
		if err != nil {
			t.Fatalf("resolved config does not load: %v\n%s", err, out)
		}
		if back.Fingerprint() != e.Fingerprint() {
			t.Fatalf("round trip changed the fingerprint\n%s", out)
		}
	})
}
