package protocol

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/partition"
)

// allClasses is the label space of every class of ds.
func allClasses(ds *dataset.Dataset) Space {
	all := make([]int, len(ds.Classes))
	for i := range all {
		all[i] = i
	}
	return Space{"all", all}
}

// evalOf scores the given test images over the "all" space.
func evalOf(name string, test []dataset.Item, idx []int) *EvalSet {
	ev := &EvalSet{Name: name}
	for _, i := range idx {
		ev.Images = append(ev.Images, i)
		ev.Labels = append(ev.Labels, test[i].Label)
	}
	return ev
}

// byDomain indexes items by domain.
func byDomain(items []dataset.Item) map[int][]int {
	out := map[int][]int{}
	for i, it := range items {
		out[it.Domain] = append(out[it.Domain], i)
	}
	return out
}

// fewShotPerDomain draws shots images per class within every domain (each
// domain from its own stream of the seed), in ascending domain order.
func fewShotPerDomain(items []dataset.Item, shots int, seed uint64) []dataset.Item {
	groups := byDomain(items)
	var out []dataset.Item
	for _, d := range slices.Sorted(maps.Keys(groups)) {
		sub := make([]dataset.Item, len(groups[d]))
		for k, i := range groups[d] {
			sub[k] = items[i]
		}
		out = append(out, partition.FewShot(sub, shots, seed^(uint64(d+1)*0x9e3779b97f4a7c15))...)
	}
	return out
}

// pathological deals the classes to o.Clients clients without overlap
// (pFedMoAP's CLIP-dataset setting); each client trains on its classes and
// is scored on their test images, over all classes.
func pathological(ds *dataset.Dataset, train, test []dataset.Item, o Options) (*Task, error) {
	space := allClasses(ds)
	deal, err := partition.Pathological(space.Classes, o.Clients, o.Seed)
	if err != nil {
		return nil, err
	}
	owner := map[int]int{}
	for c, classes := range deal {
		for _, l := range classes {
			owner[l] = c
		}
	}
	t := &Task{Protocol: Pathological, Dataset: ds, Train: train, Test: test,
		Spaces: []Space{space}, Metrics: []string{"acc"}}
	trainOf, testOf := make([][]int, len(deal)), make([][]int, len(deal))
	for i, it := range train {
		trainOf[owner[it.Label]] = append(trainOf[owner[it.Label]], i)
	}
	for i, it := range test {
		testOf[owner[it.Label]] = append(testOf[owner[it.Label]], i)
	}
	for c, classes := range deal {
		slices.Sort(classes)
		if len(trainOf[c]) == 0 || len(testOf[c]) == 0 {
			return nil, fmt.Errorf("protocol %s: client %d (classes %v) has %d training and %d test images", Pathological, c, classes, len(trainOf[c]), len(testOf[c]))
		}
		ct := ClientTask{ID: c, Train: trainOf[c], Evals: []*EvalSet{evalOf("acc", test, testOf[c])}}
		for _, i := range trainOf[c] {
			ct.Labels = append(ct.Labels, train[i].Label)
		}
		t.Clients = append(t.Clients, ct)
	}
	return t, nil
}

// natural makes each domain with training images a client, scored on its
// own test images when it has some (a writer with training data only, as
// in LEAF's user split, trains and has no local score); domains with test
// images only become global evaluation sets named [UnseenMetric].
func natural(ds *dataset.Dataset, train, test []dataset.Item, o Options) (*Task, error) {
	t := &Task{Protocol: Natural, Dataset: ds, Train: train, Test: test,
		Spaces: []Space{allClasses(ds)}}
	trainBy, testBy := byDomain(train), byDomain(test)
	scored := false
	for d := range ds.Domains {
		tr, te := trainBy[d], testBy[d]
		switch {
		case len(tr) == 0 && len(te) > 0:
			t.GlobalEvals = append(t.GlobalEvals, evalOf(UnseenMetric, test, te))
		case len(tr) > 0:
			ct := ClientTask{ID: len(t.Clients), Domain: d, Train: tr}
			if len(te) > 0 {
				ct.Evals = []*EvalSet{evalOf("acc", test, te)}
				scored = true
			}
			for _, i := range tr {
				ct.Labels = append(ct.Labels, train[i].Label)
			}
			t.Clients = append(t.Clients, ct)
		}
	}
	if len(t.Clients) == 0 {
		return nil, fmt.Errorf("protocol %s: dataset %s: no domain has training images", Natural, ds.Name)
	}
	if scored {
		t.Metrics = append(t.Metrics, "acc")
	}
	if len(t.GlobalEvals) > 0 {
		t.Metrics = append(t.Metrics, UnseenMetric)
	}
	if len(t.Metrics) == 0 {
		return nil, fmt.Errorf("protocol %s: dataset %s: no test images: nothing to score", Natural, ds.Name)
	}
	return t, nil
}

// leaveOneDomainOut: clients from every domain but the held-out one (one per
// domain, or o.PerDomain per domain by Dir(o.Beta)), each scored on its own
// domain's test images; the global model on the held-out domain's.
func leaveOneDomainOut(ds *dataset.Dataset, train, test []dataset.Item, o Options) (*Task, error) {
	if o.HeldOut == "" {
		return nil, fmt.Errorf("protocol %s: no held-out domain (set held_out, or use BuildAll for every domain in turn)", o.Name)
	}
	h, err := ResolveDomain(ds, o.HeldOut)
	if err != nil {
		return nil, fmt.Errorf("protocol %s: %w", o.Name, err)
	}
	t := &Task{Protocol: o.Name, Dataset: ds, Train: train, Test: test, HeldOut: ds.Domains[h],
		Spaces: []Space{allClasses(ds)}, Metrics: []string{"acc", GlobalMetric}}
	if o.Name == DomainGeneralization {
		t.Metrics = []string{GlobalMetric}
	}
	trainBy, testBy := byDomain(train), byDomain(test)
	if len(testBy[h]) == 0 {
		return nil, fmt.Errorf("protocol %s: held-out domain %q has no test images", o.Name, ds.Domains[h])
	}
	t.GlobalEvals = []*EvalSet{evalOf(GlobalMetric, test, testBy[h])}
	// Source domains' items, and the maps back to train / test indices.
	srcTrain, srcTest := outsideDomain(train, h), outsideDomain(test, h)
	if len(srcTrain) == 0 {
		return nil, fmt.Errorf("protocol %s: no training images outside the held-out domain %q", o.Name, ds.Domains[h])
	}
	addClient := func(dom int, tr, te []int) error {
		if len(tr) == 0 || len(te) == 0 {
			return fmt.Errorf("protocol %s: domain %q: a client has %d training and %d test images", o.Name, ds.Domains[dom], len(tr), len(te))
		}
		ct := ClientTask{ID: len(t.Clients), Domain: dom, Train: tr, Evals: []*EvalSet{evalOf("acc", test, te)}}
		for _, i := range tr {
			ct.Labels = append(ct.Labels, train[i].Label)
		}
		t.Clients = append(t.Clients, ct)
		return nil
	}
	if o.PerDomain <= 1 {
		for d := range ds.Domains {
			if d == h || len(trainBy[d]) == 0 {
				continue
			}
			if err := addClient(d, trainBy[d], testBy[d]); err != nil {
				return nil, err
			}
		}
		return t, nil
	}
	sub := func(items []dataset.Item, idx []int) []dataset.Item {
		out := make([]dataset.Item, len(idx))
		for k, i := range idx {
			out[k] = items[i]
		}
		return out
	}
	cfg := partition.DirichletConfig{Clients: o.PerDomain, Beta: o.Beta, MinSize: o.MinSamples}
	clients, err := partition.DomainDirichlet(sub(train, srcTrain), sub(test, srcTest), cfg, o.Seed)
	if err != nil {
		return nil, fmt.Errorf("protocol %s: %w", o.Name, err)
	}
	for _, c := range clients {
		tr, te := make([]int, len(c.Train)), make([]int, len(c.Test))
		for k, i := range c.Train {
			tr[k] = srcTrain[i]
		}
		for k, i := range c.Test {
			te[k] = srcTest[i]
		}
		if err := addClient(c.Domain, tr, te); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// outsideDomain lists the indices of items not of domain h.
func outsideDomain(items []dataset.Item, h int) []int {
	var idx []int
	for i, it := range items {
		if it.Domain != h {
			idx = append(idx, i)
		}
	}
	return idx
}

// HeldOutDomains lists the domains [BuildAll] holds out in turn: the one
// o.HeldOut names, or every domain of ds when it is empty. Protocols
// without a held-out domain give nil.
func HeldOutDomains(ds *dataset.Dataset, o Options) ([]string, error) {
	if o.Name != LeaveOneDomainOut && o.Name != DomainGeneralization {
		return nil, nil
	}
	if o.HeldOut != "" {
		h, err := ResolveDomain(ds, o.HeldOut)
		if err != nil {
			return nil, fmt.Errorf("protocol %s: %w", o.Name, err)
		}
		return []string{ds.Domains[h]}, nil
	}
	if len(ds.Domains) < 2 {
		return nil, fmt.Errorf("protocol %s: dataset %s has %d domain(s), need at least 2", o.Name, ds.Name, len(ds.Domains))
	}
	return slices.Clone(ds.Domains), nil
}

// BuildAll builds one Task per held-out domain for leave_one_domain_out and
// domain_generalization ([HeldOutDomains], in domain order), and the single
// Task of [Build] for the other protocols.
func BuildAll(ds *dataset.Dataset, o Options) ([]*Task, error) {
	held, err := HeldOutDomains(ds, o)
	if err != nil {
		return nil, err
	}
	if held == nil {
		t, err := Build(ds, o)
		if err != nil {
			return nil, err
		}
		return []*Task{t}, nil
	}
	out := make([]*Task, 0, len(held))
	for _, h := range held {
		oh := o
		oh.HeldOut = h
		t, err := Build(ds, oh)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

var locationRE = regexp.MustCompile(`^location_?(\d+)$`)

// DomainAbbrev is the short name the papers' tables give a domain:
// "location_38" → "L38" (TerraIncognita), otherwise the upper-cased first
// letter ("art_painting" → "A", "Real World" → "R").
func DomainAbbrev(name string) string {
	if m := locationRE.FindStringSubmatch(strings.ToLower(name)); m != nil {
		return "L" + m[1]
	}
	if name == "" {
		return ""
	}
	return strings.ToUpper(name[:1])
}

// ResolveDomain finds the domain of ds that name denotes: its exact name,
// the name ignoring case, spaces, '_' and '-' ("real_world" for "Real
// World"), or its [DomainAbbrev] when no other domain shares it ("R",
// "L38").
func ResolveDomain(ds *dataset.Dataset, name string) (int, error) {
	if i := slices.Index(ds.Domains, name); i >= 0 {
		return i, nil
	}
	var hits []int
	for i, d := range ds.Domains {
		if dataset.FoldName(d) == dataset.FoldName(name) {
			hits = append(hits, i)
		}
	}
	if len(hits) == 0 {
		for i, d := range ds.Domains {
			if strings.EqualFold(DomainAbbrev(d), name) {
				hits = append(hits, i)
			}
		}
	}
	switch len(hits) {
	case 1:
		return hits[0], nil
	case 0:
		return 0, fmt.Errorf("dataset %s has no domain %q (domains: %q)", ds.Name, name, ds.Domains)
	}
	names := make([]string, len(hits))
	for k, i := range hits {
		names[k] = ds.Domains[i]
	}
	return 0, fmt.Errorf("dataset %s: domain %q is ambiguous: %q", ds.Name, name, names)
}

// GlobalMetrics turns the global model's accuracy on each of t.GlobalEvals
// (acc[i] for t.GlobalEvals[i]) into metrics: the unweighted mean of the
// sets sharing a name ([GlobalMetric] on the held-out domain, or
// [UnseenMetric] over the unseen writers).
func (t *Task) GlobalMetrics(acc []float64) (map[string]float64, error) {
	if len(acc) != len(t.GlobalEvals) {
		return nil, fmt.Errorf("protocol %s: %d accuracies for %d global evaluation sets", t.Protocol, len(acc), len(t.GlobalEvals))
	}
	sum, n := map[string]float64{}, map[string]int{}
	for i, e := range t.GlobalEvals {
		sum[e.Name] += acc[i]
		n[e.Name]++
	}
	for k := range sum {
		sum[k] /= float64(n[k])
	}
	return sum, nil
}

// DomainMeans averages a per-client metric (client ID → value) over the
// clients of each domain: domain name → mean. Domains without clients are
// left out.
func (t *Task) DomainMeans(perClient map[int]float64) map[string]float64 {
	sum, n := map[int]float64{}, map[int]int{}
	for _, c := range t.Clients {
		if v, ok := perClient[c.ID]; ok {
			sum[c.Domain] += v
			n[c.Domain]++
		}
	}
	out := map[string]float64{}
	for d, s := range sum {
		if d >= 0 && d < len(t.Dataset.Domains) {
			out[t.Dataset.Domains[d]] = s / float64(n[d])
		}
	}
	return out
}
