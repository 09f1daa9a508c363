package protocol

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/dataset"
)

// memDataset has nTrain / nTest images per (domain, class), as 1×1 pixels.
func memDataset(domains []string, classes, nTrain, nTest int) *dataset.Dataset {
	d := &dataset.Dataset{Name: "mem", Domains: domains}
	for c := range classes {
		d.Classes = append(d.Classes, fmt.Sprintf("class %d", c))
	}
	for dom, dn := range domains {
		for c := range classes {
			for k := range nTrain + nTest {
				it := dataset.Item{Key: fmt.Sprintf("%s/%d/%d", dn, c, k), Label: c, Domain: dom,
					Source: dataset.Pixels{Width: 1, Height: 1, Channels: 1, Pix: []byte{byte(k)}}}
				if k < nTrain {
					d.Train = append(d.Train, it)
				} else {
					d.Test = append(d.Test, it)
				}
			}
		}
	}
	return d
}

// checkLabels checks that every client's and evaluation set's labels are
// the labels of the images they index (the "all" space is the identity).
func checkLabels(t *testing.T, task *Task) {
	t.Helper()
	for _, c := range task.Clients {
		if len(c.Labels) != len(c.Train) {
			t.Fatalf("client %d: %d labels for %d images", c.ID, len(c.Labels), len(c.Train))
		}
		for k, i := range c.Train {
			if task.Train[i].Label != c.Labels[k] {
				t.Fatalf("client %d: label %d for image of class %d", c.ID, c.Labels[k], task.Train[i].Label)
			}
		}
		for _, e := range append(slices.Clone(c.Evals), task.GlobalEvals...) {
			for k, i := range e.Images {
				if task.Test[i].Label != e.Labels[k] {
					t.Fatalf("eval %s: label %d for image of class %d", e.Name, e.Labels[k], task.Test[i].Label)
				}
			}
		}
	}
}

func TestLeaveOneDomainOut(t *testing.T) {
	ds := memDataset([]string{"Art", "Clipart", "Product", "Real World"}, 3, 6, 3)
	task, err := Build(ds, Options{Name: LeaveOneDomainOut, HeldOut: "real_world", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if task.HeldOut != "Real World" || len(task.Clients) != 3 || !slices.Equal(task.Metrics, []string{"acc", GlobalMetric}) {
		t.Fatalf("held out %q, %d clients, metrics %v", task.HeldOut, len(task.Clients), task.Metrics)
	}
	checkLabels(t, task)
	for k, c := range task.Clients {
		if c.ID != k || c.Domain != k {
			t.Fatalf("client %d: id %d domain %d", k, c.ID, c.Domain)
		}
		if len(c.Train) != 18 || len(c.Evals[0].Images) != 9 {
			t.Fatalf("client %d: %d train, %d test", k, len(c.Train), len(c.Evals[0].Images))
		}
		for _, i := range c.Train {
			if task.Train[i].Domain != c.Domain {
				t.Fatalf("client %d trains on domain %d", k, task.Train[i].Domain)
			}
		}
		for _, i := range c.Evals[0].Images {
			if task.Test[i].Domain != c.Domain {
				t.Fatalf("client %d is scored on domain %d", k, task.Test[i].Domain)
			}
		}
	}
	if len(task.GlobalEvals) != 1 || task.GlobalEvals[0].Name != GlobalMetric || len(task.GlobalEvals[0].Images) != 9 {
		t.Fatalf("global evals %+v", task.GlobalEvals)
	}
	for _, i := range task.GlobalEvals[0].Images {
		if task.Test[i].Domain != 3 {
			t.Fatalf("global set has an image of domain %d", task.Test[i].Domain)
		}
	}
	if n := len(task.UsedTest()); n != 36 {
		t.Fatalf("UsedTest has %d images, want all 36 (the held-out domain's included)", n)
	}
	if n := len(task.UsedTrain()); n != 54 {
		t.Fatalf("UsedTrain has %d images, want the 54 of the source domains", n)
	}
	dg, err := Build(ds, Options{Name: DomainGeneralization, HeldOut: "A"})
	if err != nil {
		t.Fatal(err)
	}
	if dg.HeldOut != "Art" || !slices.Equal(dg.Metrics, []string{GlobalMetric}) || dg.Clients[0].Domain != 1 {
		t.Fatalf("domain generalisation: held out %q, metrics %v, first client domain %d", dg.HeldOut, dg.Metrics, dg.Clients[0].Domain)
	}
	if _, err := Build(ds, Options{Name: LeaveOneDomainOut}); err == nil || !strings.Contains(err.Error(), "BuildAll") {
		t.Fatalf("no held-out domain: %v", err)
	}
}

func TestBuildAllFolds(t *testing.T) {
	ds := memDataset([]string{"location_100", "location_38", "location_43", "location_46"}, 2, 4, 2)
	tasks, err := BuildAll(ds, Options{Name: LeaveOneDomainOut})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 4 {
		t.Fatalf("%d folds", len(tasks))
	}
	for i, task := range tasks {
		if task.HeldOut != ds.Domains[i] || len(task.Clients) != 3 {
			t.Fatalf("fold %d: held out %q, %d clients", i, task.HeldOut, len(task.Clients))
		}
		for _, c := range task.Clients {
			if c.Domain == i {
				t.Fatalf("fold %d: a client trains on the held-out domain", i)
			}
		}
	}
	one, err := BuildAll(ds, Options{Name: LeaveOneDomainOut, HeldOut: "L38"})
	if err != nil || len(one) != 1 || one[0].HeldOut != "location_38" {
		t.Fatalf("L38: %v, %d tasks", err, len(one))
	}
	plain, err := BuildAll(ds, Options{Name: Dirichlet, Clients: 2, Beta: 1, MinSamples: 1, Seed: 1})
	if err != nil || len(plain) != 1 || plain[0].HeldOut != "" {
		t.Fatalf("dirichlet: %v, %d tasks", err, len(plain))
	}
	if _, err := BuildAll(memDataset([]string{"only"}, 2, 2, 2), Options{Name: LeaveOneDomainOut}); err == nil {
		t.Fatal("one domain: no error")
	}
}

func TestLeaveOneDomainOutDirichletAndShots(t *testing.T) {
	ds := memDataset([]string{"a", "b", "c"}, 4, 20, 10)
	task, err := Build(ds, Options{Name: LeaveOneDomainOut, HeldOut: "b", PerDomain: 2, Beta: 0.5, MinSamples: 2, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(task.Clients) != 4 {
		t.Fatalf("%d clients, want 2 per source domain", len(task.Clients))
	}
	checkLabels(t, task)
	perDom := map[int]int{}
	for k, c := range task.Clients {
		if c.ID != k || c.Domain == 1 {
			t.Fatalf("client %d: id %d domain %d", k, c.ID, c.Domain)
		}
		perDom[c.Domain]++
		for _, i := range c.Train {
			if task.Train[i].Domain != c.Domain {
				t.Fatalf("client %d (domain %d) trains on domain %d", k, c.Domain, task.Train[i].Domain)
			}
		}
	}
	if perDom[0] != 2 || perDom[2] != 2 {
		t.Fatalf("clients per domain %v", perDom)
	}
	shots, err := Build(ds, Options{Name: LeaveOneDomainOut, HeldOut: "c", Shots: 3, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range shots.Clients {
		perClass := map[int]int{}
		for _, i := range c.Train {
			perClass[shots.Train[i].Label]++
		}
		for l, n := range perClass {
			if n != 3 {
				t.Fatalf("client %d class %d: %d shots, want 3 per class and domain", c.ID, l, n)
			}
		}
	}
}

func TestResolveDomain(t *testing.T) {
	ds := memDataset([]string{"Caltech101", "LabelMe", "SUN09", "VOC2007", "Clipart"}, 1, 1, 1)
	for name, want := range map[string]int{"SUN09": 2, "sun09": 2, "L": 1, "v": 3, "Clip_art": 4} {
		got, err := ResolveDomain(ds, name)
		if err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", name, got, err, want)
		}
	}
	if _, err := ResolveDomain(ds, "C"); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Errorf("C: %v", err)
	}
	if _, err := ResolveDomain(ds, "sketch"); err == nil || !strings.Contains(err.Error(), `"LabelMe"`) {
		t.Errorf("sketch: %v", err)
	}
	if _, err := Build(ds, Options{Name: LeaveOneDomainOut, HeldOut: "sketch"}); err == nil {
		t.Error("unknown held-out domain: no error")
	}
}

func TestPathological(t *testing.T) {
	ds := memDataset([]string{"mem"}, 10, 4, 2)
	a, err := Build(ds, Options{Name: Pathological, Clients: 3, Shots: 2, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(ds, Options{Name: Pathological, Clients: 3, Shots: 2, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	checkLabels(t, a)
	if len(a.Clients) != 3 || len(a.Spaces) != 1 || len(a.Spaces[0].Classes) != 10 {
		t.Fatalf("%d clients, spaces %v", len(a.Clients), a.Spaces)
	}
	owner := map[int]int{}
	for k, c := range a.Clients {
		classes := map[int]bool{}
		for _, i := range c.Train {
			l := a.Train[i].Label
			classes[l] = true
			if o, ok := owner[l]; ok && o != k {
				t.Fatalf("class %d held by clients %d and %d", l, o, k)
			}
			owner[l] = k
		}
		if len(c.Train) != 2*len(classes) {
			t.Fatalf("client %d: %d images of %d classes with 2 shots", k, len(c.Train), len(classes))
		}
		for _, i := range c.Evals[0].Images {
			if !classes[a.Test[i].Label] {
				t.Fatalf("client %d is scored on class %d it does not hold", k, a.Test[i].Label)
			}
		}
		if len(c.Evals[0].Images) != 2*len(classes) {
			t.Fatalf("client %d: %d test images for %d classes", k, len(c.Evals[0].Images), len(classes))
		}
		if !slices.Equal(c.Train, b.Clients[k].Train) {
			t.Fatalf("client %d: same seed, different split", k)
		}
	}
	if len(owner) != 10 {
		t.Fatalf("%d of 10 classes dealt", len(owner))
	}
	if _, err := Build(ds, Options{Name: Pathological, Clients: 11, Seed: 5}); err == nil {
		t.Fatal("11 clients for 10 classes: no error")
	}
}

func TestNatural(t *testing.T) {
	ds := memDataset([]string{"f_a", "f_b", "f_c", "f_d"}, 2, 3, 1)
	// f_c has test images only (an unseen writer).
	ds.Train = slices.DeleteFunc(ds.Train, func(it dataset.Item) bool { return it.Domain == 2 })
	task, err := Build(ds, Options{Name: Natural})
	if err != nil {
		t.Fatal(err)
	}
	checkLabels(t, task)
	if len(task.Clients) != 3 || task.Clients[2].Domain != 3 || task.Clients[2].ID != 2 {
		t.Fatalf("clients %+v", task.Clients)
	}
	if len(task.GlobalEvals) != 1 || task.GlobalEvals[0].Name != UnseenMetric || !slices.Equal(task.Metrics, []string{"acc", UnseenMetric}) {
		t.Fatalf("global evals %+v, metrics %v", task.GlobalEvals, task.Metrics)
	}
	for _, i := range task.GlobalEvals[0].Images {
		if task.Test[i].Domain != 2 {
			t.Fatalf("unseen set holds domain %d", task.Test[i].Domain)
		}
	}
	m, err := task.GlobalMetrics([]float64{40})
	if err != nil || m[UnseenMetric] != 40 {
		t.Fatalf("global metrics %v, %v", m, err)
	}
	if _, err := task.GlobalMetrics(nil); err == nil {
		t.Fatal("GlobalMetrics with no accuracies: no error")
	}
	// A writer with training images only (LEAF's user split) is a client
	// that trains and has no local score (issue 17: it was refused).
	ds.Test = slices.DeleteFunc(ds.Test, func(it dataset.Item) bool { return it.Domain == 1 })
	task, err = Build(ds, Options{Name: Natural})
	if err != nil {
		t.Fatalf("writer without test images: %v", err)
	}
	if len(task.Clients) != 3 || task.Clients[1].Domain != 1 || len(task.Clients[1].Train) == 0 || len(task.Clients[1].Evals) != 0 || len(task.Clients[0].Evals) != 1 {
		t.Fatalf("clients %+v", task.Clients)
	}
	// No writer with both: only the unseen writers are scored.
	ds.Test = slices.DeleteFunc(ds.Test, func(it dataset.Item) bool { return it.Domain != 2 })
	task, err = Build(ds, Options{Name: Natural})
	if err != nil || !slices.Equal(task.Metrics, []string{UnseenMetric}) || len(task.Clients) != 3 {
		t.Fatalf("user split: %v, %+v", err, task)
	}
	ds.Test = nil
	if _, err := Build(ds, Options{Name: Natural}); err == nil || !strings.Contains(err.Error(), "0 test images") {
		t.Fatalf("no test images at all: %v", err)
	}
}

func TestGlobalMetricsMean(t *testing.T) {
	task := &Task{GlobalEvals: []*EvalSet{{Name: UnseenMetric}, {Name: UnseenMetric}, {Name: GlobalMetric}}}
	m, err := task.GlobalMetrics([]float64{50, 70, 90})
	if err != nil || m[UnseenMetric] != 60 || m[GlobalMetric] != 90 {
		t.Fatalf("%v, %v", m, err)
	}
}

// TestPFedMoAPDomainNet: FedBN's DomainNet lists, 6 domains × 5 clients by
// Dir(0.3) under the domains protocol.
func TestPFedMoAPDomainNet(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "DomainNet")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range dataset.DomainNetSites {
		for split, n := range map[string]int{"train": 12, "test": 6} {
			var b strings.Builder
			for _, c := range dataset.DomainNetClasses {
				for k := range n {
					fmt.Fprintf(&b, "DomainNet/%s/%s/%s_%d.jpg\t%s\n", s, c, split, k, c)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, s+"_"+split+".tsv"), []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	ds, err := dataset.Load("domainnet", root, dataset.Options{})
	if err != nil {
		t.Fatal(err)
	}
	task, err := Build(ds, Options{Name: Domains, PerDomain: 5, Beta: 0.3, MinSamples: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(task.Clients) != 30 {
		t.Fatalf("%d clients, want 30", len(task.Clients))
	}
	acc := map[int]float64{}
	for _, c := range task.Clients {
		if c.ID/5 != c.Domain {
			t.Fatalf("client %d in domain %d", c.ID, c.Domain)
		}
		acc[c.ID] = float64(c.Domain)
	}
	means := task.DomainMeans(acc)
	if len(means) != 6 || means["quickdraw"] != 3 {
		t.Fatalf("domain means %v", means)
	}
}

// TestLeaveOneDomainOutOnDisk: PACS in the DomainBed layout, sketch held out.
func TestLeaveOneDomainOutOnDisk(t *testing.T) {
	root := t.TempDir()
	for _, d := range dataset.PACSDomains {
		for _, c := range dataset.PACSClasses {
			p := filepath.Join(root, "PACS", d, c)
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			for k := range 5 {
				if err := os.WriteFile(filepath.Join(p, fmt.Sprintf("%d.png", k)), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	ds, err := dataset.Load("pacs", root, dataset.Options{Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	task, err := Build(ds, Options{Name: LeaveOneDomainOut, HeldOut: "S", Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	if task.HeldOut != "sketch" || len(task.Clients) != 3 || len(task.GlobalEvals[0].Images) != 7 {
		t.Fatalf("held out %q, %d clients, %d global images", task.HeldOut, len(task.Clients), len(task.GlobalEvals[0].Images))
	}
}
