// Package protocol cuts a dataset into federated clients and evaluation
// sets: base-to-novel, Dirichlet label shift and domains (baselines.md §7),
// the pathological class split (pFedMoAP), one client per domain or writer
// ("natural"), leave-one-domain-out (FedOT's G/P/C matrix) and federated
// domain generalisation (ADAPT). A Task says which images each client trains
// on, over which label space, on which sets it is scored, and on which sets
// the server's global model is scored.
package protocol

import (
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/pfedmma/pfedmma/dataset"
	"github.com/pfedmma/pfedmma/partition"
)

// Protocol names.
const (
	BaseToNovel = "base2novel"
	Dirichlet   = "dirichlet"
	Domains     = "domains"
	// Pathological deals the classes to the clients without overlap; each
	// client is scored on its own classes' test images over all classes.
	Pathological = "pathological"
	// Natural makes every domain (every FEMNIST writer) with training
	// images one client, scored on its own test images; domains with test
	// images only are scored with the global model ("unseen").
	Natural = "natural"
	// LeaveOneDomainOut trains on every domain but Options.HeldOut, one
	// client per domain; clients are scored on their own domain with their
	// personalised models, the global model on the held-out domain.
	LeaveOneDomainOut = "leave_one_domain_out"
	// DomainGeneralization is LeaveOneDomainOut reported as federated
	// domain generalisation: the global model's accuracy on the unseen
	// domain.
	DomainGeneralization = "domain_generalization"
)

// Names lists the protocol names Build accepts.
var Names = []string{BaseToNovel, Dirichlet, Domains, Pathological, Natural, LeaveOneDomainOut, DomainGeneralization}

// Metric names of the global model's evaluation sets.
const (
	// GlobalMetric scores the global model on the held-out domain.
	GlobalMetric = "global"
	// UnseenMetric scores the global model on a domain (writer) no client
	// trains on, under the natural protocol.
	UnseenMetric = "unseen"
)

// Space is a label space: the classes whose prompts form a classifier.
type Space struct {
	Name    string `json:"name"`
	Classes []int  `json:"classes"` // dataset labels, in logit order
}

// EvalSet is a set of test images scored over one label space.
type EvalSet struct {
	Name   string // metric name: "local", "base", "novel", "acc"
	Space  int    // index into Task.Spaces
	Images []int  // indices into Task.Test
	Labels []int  // label in the space's logit order, per image
}

// ClientTask is one client's share of the task.
type ClientTask struct {
	ID     int
	Domain int
	Train  []int // indices into Task.Train
	Labels []int // training label in the TrainSpace's logit order
	// TrainSpace is the label space the client trains over.
	TrainSpace int
	Evals      []*EvalSet // may be shared between clients
}

// Task is a dataset cut into clients and evaluation sets by a protocol.
type Task struct {
	Protocol string
	Dataset  *dataset.Dataset
	Train    []dataset.Item // the (few-shot) training images in use
	// Test are the evaluation images in use: the test images, then (with
	// Options.Validation > 0) the training-split images held out as the
	// clients' validation sets, which only [ValidationMetric] sets name.
	Test    []dataset.Item
	Spaces  []Space
	Clients []ClientTask
	// Metrics are the metric names, in report order: the clients'
	// (from their Evals) and the global model's (from GlobalEvals).
	Metrics []string
	// GlobalEvals are scored with the method's global model (the server's
	// aggregate, with no client's personal parts), not a client's; see
	// [Task.GlobalMetrics]. Empty for protocols without one.
	GlobalEvals []*EvalSet
	// HeldOut names the held-out domain of leave-one-domain-out and
	// domain generalisation; empty otherwise.
	HeldOut string
	// ValidationOnly is set by [Task.KeepValidationOnly]: the clients are
	// scored on their validation sets only, and Metrics is just "val".
	ValidationOnly bool
}

// Options configure how a dataset is cut into clients.
type Options struct {
	Name       string
	Clients    int
	Shots      int     // training images per class (0 = all)
	Beta       float64 // Dirichlet concentration
	PerDomain  int     // clients per domain (domains protocol)
	MinSamples int     // Dirichlet: minimum train and test samples per client
	UseVal     bool    // evaluate on the validation split instead of test
	// OthersBase makes base-to-novel's Base set the base classes held by
	// other clients (the pFedMMA paper's wording) instead of every base
	// class (the reference code's and the default).
	OthersBase bool
	// HeldOut names the domain left out by leave_one_domain_out and
	// domain_generalization (see [ResolveDomain]); empty means every
	// domain in turn ([BuildAll]).
	HeldOut string
	// Validation, in [0, 1), holds out that fraction of every client's
	// training images as its validation set (see [ValidationMetric]).
	Validation float64
	Seed       uint64
}

// Build applies a protocol to a dataset, then holds out each client's
// validation images when o.Validation > 0.
func Build(ds *dataset.Dataset, o Options) (*Task, error) {
	t, err := build(ds, o)
	if err != nil {
		return nil, err
	}
	if err := holdOutValidation(t, o.Validation, o.Seed); err != nil {
		return nil, err
	}
	return t, nil
}

// build applies a protocol to a dataset.
func build(ds *dataset.Dataset, o Options) (*Task, error) {
	test := ds.Test
	if o.UseVal {
		if len(ds.Val) == 0 {
			return nil, fmt.Errorf("experiment: dataset %s has no validation split", ds.Name)
		}
		test = ds.Val
	}
	train := ds.Train
	perDomain := o.Name == Natural || o.Name == LeaveOneDomainOut || o.Name == DomainGeneralization
	switch {
	case o.Shots > 0 && perDomain:
		train = fewShotPerDomain(ds.Train, o.Shots, o.Seed)
	case o.Shots > 0:
		train = partition.FewShot(ds.Train, o.Shots, o.Seed)
	}
	if len(train) == 0 || len(test) == 0 {
		return nil, fmt.Errorf("experiment: dataset %s: %d training and %d test images", ds.Name, len(train), len(test))
	}
	switch o.Name {
	case BaseToNovel:
		return baseToNovel(ds, train, test, o)
	case Dirichlet, Domains:
		return labelShift(ds, train, test, o)
	case Pathological:
		return pathological(ds, train, test, o)
	case Natural:
		return natural(ds, train, test, o)
	case LeaveOneDomainOut, DomainGeneralization:
		return leaveOneDomainOut(ds, train, test, o)
	}
	return nil, fmt.Errorf("experiment: unknown protocol %q (want one of %v)", o.Name, Names)
}

// baseToNovel: base classes dealt to clients without overlap; each client
// trains over all base classes and is scored on Local (its own classes'
// test images), Base (every base test image) and Novel (every novel test
// image, over the novel classes only).
func baseToNovel(ds *dataset.Dataset, train, test []dataset.Item, o Options) (*Task, error) {
	b2n, err := partition.NewBaseToNovel(train, test, len(ds.Classes), o.Clients, o.Seed)
	if err != nil {
		return nil, err
	}
	t := &Task{Protocol: BaseToNovel, Dataset: ds, Train: train, Test: test,
		Spaces:  []Space{{"base", b2n.Split.Base}, {"novel", b2n.Split.Novel}},
		Metrics: []string{"local", "base", "novel", "hm"}}
	base := mappedEval("base", 0, test, b2n.Base, b2n.Split.BaseMap)
	novel := mappedEval("novel", 1, test, b2n.Novel, b2n.Split.NovelMap)
	for _, c := range b2n.Clients {
		ct := ClientTask{ID: c.ID, TrainSpace: 0}
		for _, i := range c.Train {
			ct.Train = append(ct.Train, i)
			ct.Labels = append(ct.Labels, b2n.Split.BaseMap[train[i].Label])
		}
		local := mappedEval("local", 0, test, c.Test, b2n.Split.BaseMap)
		if len(ct.Train) == 0 || len(local.Images) == 0 {
			return nil, fmt.Errorf("experiment: base-to-novel client %d has %d training and %d local test images", c.ID, len(ct.Train), len(local.Images))
		}
		clientBase := base
		if o.OthersBase {
			clientBase = mappedEval("base", 0, test, b2n.OthersBase(test, c.ID), b2n.Split.BaseMap)
		}
		ct.Evals = []*EvalSet{local, clientBase, novel}
		t.Clients = append(t.Clients, ct)
	}
	return t, nil
}

// mappedEval scores the test images idx in space, each labelled by
// labelOf[its class] (the class's index in the space).
func mappedEval(name string, space int, test []dataset.Item, idx []int, labelOf map[int]int) *EvalSet {
	ev := &EvalSet{Name: name, Space: space}
	for _, i := range idx {
		ev.Images = append(ev.Images, i)
		ev.Labels = append(ev.Labels, labelOf[test[i].Label])
	}
	return ev
}

// labelShift: Dirichlet label shift (optionally within each domain); every
// client trains and is scored over all classes on its own test split.
func labelShift(ds *dataset.Dataset, train, test []dataset.Item, o Options) (*Task, error) {
	cfg := partition.DirichletConfig{Beta: o.Beta, MinSize: o.MinSamples}
	var clients []partition.Client
	var err error
	if o.Name == Domains {
		cfg.Clients = max(o.PerDomain, 1)
		clients, err = partition.DomainDirichlet(train, test, cfg, o.Seed)
	} else {
		cfg.Clients = o.Clients
		clients, err = partition.Dirichlet(train, test, cfg, o.Seed)
	}
	if err != nil {
		return nil, err
	}
	all := make([]int, len(ds.Classes))
	for i := range all {
		all[i] = i
	}
	t := &Task{Protocol: o.Name, Dataset: ds, Train: train, Test: test,
		Spaces: []Space{{"all", all}}, Metrics: []string{"acc"}}
	for _, c := range clients {
		ct := ClientTask{ID: c.ID, Domain: c.Domain}
		for _, i := range c.Train {
			ct.Train = append(ct.Train, i)
			ct.Labels = append(ct.Labels, train[i].Label)
		}
		ct.Evals = []*EvalSet{evalOf("acc", test, c.Test)}
		t.Clients = append(t.Clients, ct)
	}
	sort.Slice(t.Clients, func(a, b int) bool { return t.Clients[a].ID < t.Clients[b].ID })
	return t, nil
}

// UsedTrain returns the sorted training indices any client uses.
func (t *Task) UsedTrain() []int {
	seen := map[int]bool{}
	for _, c := range t.Clients {
		for _, i := range c.Train {
			seen[i] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// UsedTest returns the sorted test indices any evaluation set uses, the
// global model's included.
func (t *Task) UsedTest() []int {
	seen := map[int]bool{}
	for _, c := range t.Clients {
		for _, e := range c.Evals {
			for _, i := range e.Images {
				seen[i] = true
			}
		}
	}
	for _, e := range t.GlobalEvals {
		for _, i := range e.Images {
			seen[i] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}
