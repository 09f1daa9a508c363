package partition

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/pfedmma/pfedmma/dataset"
)

// Defaults of [DirichletConfig].
const (
	DefaultMinSize    = 10
	DefaultMaxRetries = 1000
)

// DirichletConfig configures a Dirichlet label-shift partition.
type DirichletConfig struct {
	// Clients is the number of clients (per domain for [DomainDirichlet]).
	Clients int
	// Beta is the concentration of Dir(β·1): small β, strong label skew.
	Beta float64
	// MinSize is the fewest train and the fewest test items every client
	// must get; 0 means [DefaultMinSize], a negative value no minimum.
	MinSize int
	// MaxRetries bounds the redraws when a client falls short of MinSize;
	// 0 means [DefaultMaxRetries].
	MaxRetries int
}

func (c DirichletConfig) withDefaults() DirichletConfig {
	if c.MinSize == 0 {
		c.MinSize = DefaultMinSize
	}
	if c.MinSize < 0 {
		c.MinSize = 0
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = DefaultMaxRetries
	}
	return c
}

// Dirichlet deals train and test items to cfg.Clients clients with label
// shift. For each class (ascending): its train and test indices are
// shuffled; p ~ Dir(β·1_K); clients already holding at least N_train/K
// training items get p = 0; p is renormalised; the class's train indices
// and its test indices are cut at the same cumulative proportions (test
// follows train). The whole draw is repeated until every client has at
// least cfg.MinSize train and test items, or fails after cfg.MaxRetries
// attempts. Client indices are ascending.
func Dirichlet(train, test []dataset.Item, cfg DirichletConfig, seed uint64) ([]Client, error) {
	cfg = cfg.withDefaults()
	rng := newRand(seed, streamDirichlet)
	return dirichlet(labelsOf(train), labelsOf(test), iota0(len(train)), iota0(len(test)), cfg, rng, 0)
}

// DomainDirichlet splits each domain's items into cfg.Clients clients by
// the [Dirichlet] rule; clients are numbered domain by domain in ascending
// domain order. Each domain draws from its own stream of the run seed, so a
// domain's partition does not depend on which other domains are present.
func DomainDirichlet(train, test []dataset.Item, cfg DirichletConfig, seed uint64) ([]Client, error) {
	cfg = cfg.withDefaults()
	trainByDom := map[int][]int{}
	testByDom := map[int][]int{}
	for i, it := range train {
		trainByDom[it.Domain] = append(trainByDom[it.Domain], i)
	}
	for i, it := range test {
		testByDom[it.Domain] = append(testByDom[it.Domain], i)
	}
	var domains []int
	for d := range trainByDom {
		domains = append(domains, d)
	}
	for d := range testByDom {
		if _, ok := trainByDom[d]; !ok {
			return nil, fmt.Errorf("partition: domain %d has test items but no training items", d)
		}
	}
	slices.Sort(domains)
	trainLabels, testLabels := labelsOf(train), labelsOf(test)
	var out []Client
	for _, d := range domains {
		if d < 0 {
			return nil, fmt.Errorf("partition: negative domain %d", d)
		}
		rng := newRand(seed, streamDomain+uint64(d))
		cs, err := dirichlet(trainLabels, testLabels, trainByDom[d], testByDom[d], cfg, rng, d)
		if err != nil {
			return nil, fmt.Errorf("partition: domain %d: %w", d, err)
		}
		for _, c := range cs {
			c.ID = len(out)
			out = append(out, c)
		}
	}
	return out, nil
}

// dirichlet partitions the items trainIdx / testIdx (indices into the label
// slices) among cfg.Clients clients of domain dom.
func dirichlet(trainLabels, testLabels, trainIdx, testIdx []int, cfg DirichletConfig, rng *rand.Rand, dom int) ([]Client, error) {
	k := cfg.Clients
	if err := checkDirichlet(trainLabels, trainIdx, testIdx, cfg); err != nil {
		return nil, err
	}
	classes, trainBy := byLabel(trainLabels, trainIdx)
	testClasses, testBy := byLabel(testLabels, testIdx)
	for _, l := range testClasses {
		if _, ok := trainBy[l]; !ok {
			classes = append(classes, l) // test-only class: still dealt by a fresh p
		}
	}
	slices.Sort(classes)
	d := dealer{rng: rng, beta: cfg.Beta, threshold: float64(len(trainIdx)) / float64(k), p: make([]float64, k)}
	for attempt := 1; attempt <= cfg.MaxRetries; attempt++ {
		trainOf := make([][]int, k)
		testOf := make([][]int, k)
		for _, l := range classes {
			d.deal(trainOf, testOf, trainBy[l], testBy[l])
		}
		if allHold(trainOf, testOf, cfg.MinSize) {
			return dirichletClients(trainLabels, trainOf, testOf, dom), nil
		}
	}
	return nil, fmt.Errorf("partition: dirichlet: no partition with every one of %d clients holding >= %d train and test items after %d attempts (β=%g, %d train, %d test items)",
		k, cfg.MinSize, cfg.MaxRetries, cfg.Beta, len(trainIdx), len(testIdx))
}

// checkDirichlet refuses a configuration no partition can satisfy and train
// indices outside trainLabels.
func checkDirichlet(trainLabels, trainIdx, testIdx []int, cfg DirichletConfig) error {
	k := cfg.Clients
	switch {
	case k < 1:
		return fmt.Errorf("partition: dirichlet: %d clients", k)
	case !(cfg.Beta > 0) || math.IsInf(cfg.Beta, 0):
		return fmt.Errorf("partition: dirichlet: β = %g, want > 0", cfg.Beta)
	case len(trainIdx) < k*cfg.MinSize || len(testIdx) < k*cfg.MinSize:
		return fmt.Errorf("partition: dirichlet: %d train / %d test items cannot give %d clients %d each", len(trainIdx), len(testIdx), k, cfg.MinSize)
	}
	for _, i := range trainIdx {
		if i < 0 || i >= len(trainLabels) {
			return fmt.Errorf("partition: dirichlet: train index %d out of range", i)
		}
	}
	return nil
}

// dealer deals one class at a time among len(p) clients by a fresh
// Dirichlet draw; clients holding threshold train items or more get no
// more.
type dealer struct {
	rng       *rand.Rand
	beta      float64
	threshold float64
	p         []float64 // the class's proportions, one per client
}

// deal shuffles one class's train and test items and appends consecutive
// runs of them to each client's trainOf / testOf, cut where the cumulative
// proportions fall (numpy's split at (cumsum(p) · n).astype(int)[:-1]).
func (d *dealer) deal(trainOf, testOf [][]int, train, test []int) {
	p, k := d.p, len(d.p)
	tr := slices.Clone(train)
	te := slices.Clone(test)
	d.rng.Shuffle(len(tr), func(i, j int) { tr[i], tr[j] = tr[j], tr[i] })
	d.rng.Shuffle(len(te), func(i, j int) { te[i], te[j] = te[j], te[i] })
	dirichletSample(d.rng, d.beta, p)
	sum := 0.0
	for j := range p {
		if float64(len(trainOf[j])) >= d.threshold {
			p[j] = 0
		}
		sum += p[j]
	}
	if sum == 0 { // every client full, or all mass underflowed: spread evenly
		for j := range p {
			p[j] = 1
		}
		sum = float64(k)
	}
	cum := 0.0
	trLo, teLo := 0, 0
	for j := range k {
		cum += p[j] / sum
		trHi, teHi := len(tr), len(te)
		if j < k-1 { // numpy: (cumsum(p) * n).astype(int)[:-1]
			trHi = min(int(cum*float64(len(tr))), len(tr))
			teHi = min(int(cum*float64(len(te))), len(te))
		}
		trainOf[j] = append(trainOf[j], tr[trLo:trHi]...)
		testOf[j] = append(testOf[j], te[teLo:teHi]...)
		trLo, teLo = trHi, teHi
	}
}

// allHold reports whether every client holds at least minSize train and
// test items.
func allHold(trainOf, testOf [][]int, minSize int) bool {
	for j := range trainOf {
		if len(trainOf[j]) < minSize || len(testOf[j]) < minSize {
			return false
		}
	}
	return true
}

// dirichletClients makes the clients of domain dom from their dealt items
// (sorted), each with the sorted labels of its train items as its classes.
func dirichletClients(trainLabels []int, trainOf, testOf [][]int, dom int) []Client {
	out := make([]Client, len(trainOf))
	for j := range out {
		slices.Sort(trainOf[j])
		slices.Sort(testOf[j])
		seen := map[int]bool{}
		for _, i := range trainOf[j] {
			seen[trainLabels[i]] = true
		}
		cls := make([]int, 0, len(seen))
		for l := range seen {
			cls = append(cls, l)
		}
		slices.Sort(cls)
		out[j] = Client{ID: j, Domain: dom, Classes: cls, Train: trainOf[j], Test: testOf[j]}
	}
	return out
}

// dirichletSample fills p with a draw from Dir(β·1): independent
// Gamma(β, 1) draws, normalised. All-zero draws (possible for tiny β)
// stay zero for the caller to handle.
func dirichletSample(rng *rand.Rand, beta float64, p []float64) {
	sum := 0.0
	for i := range p {
		p[i] = gammaSample(rng, beta)
		sum += p[i]
	}
	if sum > 0 {
		for i := range p {
			p[i] /= sum
		}
	}
}

// gammaSample draws from Gamma(shape a, scale 1) by Marsaglia and Tsang's
// method (2000); for a < 1 it draws Gamma(a+1) and multiplies by U^(1/a).
func gammaSample(rng *rand.Rand, a float64) float64 {
	if a < 1 {
		u := rng.Float64()
		return gammaSample(rng, a+1) * math.Pow(u, 1/a)
	}
	d := a - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		x2 := x * x
		if u < 1-0.0331*x2*x2 {
			return d * v
		}
		if math.Log(u) < 0.5*x2+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}
