package config

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
)

// Validate checks every field: ranges, names, the augment form and the
// protocol-specific fields. It reports all problems together (errors.Join
// of [*FieldError], each naming its field path); nil means valid. It cannot
// check what depends on the model or the data on disk (the model's depth
// against pfedmma.start, a dataset's domain names); [PFedMMA.Blocks] and the
// runner do.
func (e *Experiment) Validate() error {
	fes := e.check()
	if len(fes) == 0 {
		return nil
	}
	errs := make([]error, len(fes))
	for i, fe := range fes {
		errs[i] = fe
	}
	return errors.Join(errs...)
}

// checker collects field errors.
type checker struct{ errs []*FieldError }

func (c *checker) fail(path, format string, args ...any) {
	c.errs = append(c.errs, &FieldError{Path: path, Err: fmt.Errorf(format, args...)})
}

func (c *checker) atLeast(path string, v, lo int) {
	if v < lo {
		c.fail(path, "%d is below %d", v, lo)
	}
}

// between rejects v outside [lo, hi]; hi is a bound no real run reaches,
// there so that a typo fails here instead of exhausting memory later.
func (c *checker) between(path string, v, lo, hi int) {
	switch {
	case v < lo:
		c.fail(path, "%d is below %d", v, lo)
	case v > hi:
		c.fail(path, "%d is above %d (the largest value accepted; real runs stay far below it)", v, hi)
	}
}

// Upper bounds of the sizes: far above any real run, low enough that a
// typo (an extra digit or three) is refused before anything is allocated.
const (
	MaxBatchSize   = 4096   // batch_size, eval.batch_size
	MaxShots       = 100000 // dataset.shots (images per class)
	MaxImageSize   = 2048   // dataset.image_size (pixels per side)
	MaxNumClasses  = 10000  // dataset.num_classes
	MaxClients     = 10000  // federation.clients
	MaxRounds      = 100000 // federation.rounds, eval_every
	MaxLocalEpochs = 10000  // federation.local_epochs
	// MaxOwnLocalEpochs bounds a method's own local_epochs (the override
	// of federation.local_epochs that CLIP-LoRA, FedCLIP, FedOTP and FedMVP
	// take): their papers train 1–10 epochs a round, so 100 leaves room and
	// keeps the documented maximum runnable in the conformance suite.
	MaxOwnLocalEpochs = 100
	MaxPerDomain      = 1000    // protocol.clients_per_domain
	MaxMinSamples     = 1000000 // protocol.min_samples
	MaxThreads        = 4096    // threads
	MaxSeeds          = 1000    // seeds (runs repeated)
	MaxCacheMiB       = 1 << 24 // cache.memory_mib (16 TiB)
	maxNameLen        = 200     // name
)

// checkName accepts a plain file name: the run's default output folder is
// runs/<name>-<time>, so a name must not climb out of runs/ or into a
// sub-folder.
func (c *checker) checkName(name string) {
	switch {
	case name == "":
	case len(name) > maxNameLen:
		c.fail("name", "%d bytes; at most %d", len(name), maxNameLen)
	case name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00"):
		c.fail("name", "%q: want a plain file name (no /, \\ or ..), it names the folder runs/<name>-<time>", name)
	case strings.HasPrefix(name, "-") || strings.TrimSpace(name) != name:
		c.fail("name", "%q: want a plain file name not starting with - or a space", name)
	}
}

// finite reports (and rejects) NaN and ±Inf.
func (c *checker) finite(path string, v float64) bool {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		c.fail(path, "%v is not a finite number", v)
		return false
	}
	return true
}

func (c *checker) positive(path string, v float64) {
	if c.finite(path, v) && v <= 0 {
		c.fail(path, "%v must be > 0", v)
	}
}

func (c *checker) oneOf(path, v string, allowed ...string) {
	if !slices.Contains(allowed, v) {
		c.fail(path, "%q: want %s", v, orList(allowed))
	}
}

func orList(s []string) string {
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// datasetName is the form of registered dataset names.
var datasetName = regexp.MustCompile(`^[a-z0-9][a-z0-9_]*$`)

// rootOptional are datasets that need no dataset.root.
var rootOptional = []string{"world", "fashion_mnist"}

func (e *Experiment) check() []*FieldError {
	c := &checker{}

	c.checkName(e.Name)
	e.checkMethods(c)

	e.checkDataset(c)
	e.checkProtocol(c)

	e.checkFederation(c)

	e.checkOptimizer(c)
	c.between("batch_size", e.BatchSize, 1, MaxBatchSize)
	c.oneOf("train.drop_last", e.Train.DropLast, DropLastAuto, DropLastTrue, DropLastFalse)

	e.checkSections(c)

	if err := e.Augment.validate(); err != nil {
		c.fail("augment", "%v", err)
	}

	c.between("cache.memory_mib", e.Cache.MemoryMiB, 0, MaxCacheMiB)
	c.oneOf("cache.dtype", e.Cache.DType, DTypeFloat32, DTypeBFloat16)
	c.oneOf("engine.precision", e.Engine.Precision, "fp32", "bf16", "auto")

	e.checkSeeds(c)
	c.between("threads", e.Threads, 0, MaxThreads)
	c.oneOf("eval.split", e.Eval.Split, SplitTest, SplitVal)
	c.between("eval.batch_size", e.Eval.BatchSize, 1, MaxBatchSize)
	return c.errs
}

// checkMethods checks the method list (known, each once) and the prompt
// template.
func (e *Experiment) checkMethods(c *checker) {
	known := Methods()
	if len(e.Methods) == 0 {
		c.fail("methods", "empty; list at least one of %s", strings.Join(known, ", "))
	}
	for i, m := range e.Methods {
		p := fmt.Sprintf("methods[%d]", i)
		switch {
		case !slices.Contains(known, m):
			c.fail(p, "unknown method %q: want one of %s", m, strings.Join(known, ", "))
		case slices.Index(e.Methods, m) < i:
			c.fail(p, "%q listed twice", m)
		}
	}
	if n := strings.Count(e.Prompt, "{}"); n != 1 {
		c.fail("prompt", "%q must contain the class placeholder {} exactly once", e.Prompt)
	}
}

// checkFederation checks the federation section and the aggregation.
func (e *Experiment) checkFederation(c *checker) {
	f := e.Federation
	if e.Protocol.Name != ProtocolDomains || f.Clients != 0 {
		c.between("federation.clients", f.Clients, 1, MaxClients)
	} else {
		c.between("federation.clients", f.Clients, 0, MaxClients)
	}
	if c.finite("federation.fraction", f.Fraction) && (f.Fraction <= 0 || f.Fraction > 1) {
		c.fail("federation.fraction", "%v not in (0, 1]", f.Fraction)
	}
	c.between("federation.rounds", f.Rounds, 1, MaxRounds)
	c.between("federation.local_epochs", f.LocalEpochs, 1, MaxLocalEpochs)
	c.between("federation.eval_every", f.EvalEvery, 0, MaxRounds)
	if f.Compress != "" {
		c.oneOf("federation.compress", f.Compress, "none", "fp16", "int8")
		if f.Compress != "none" && f.SecureAggregation {
			// the masked update travels as secure aggregation's
			// fixed-point numbers, by its own messages: run and serve
			// would compress different things (a hook for the secure
			// aggregation to lift when it compresses its own)
			c.fail("federation.compress", "%s with federation.secure_aggregation: the masked uploads cannot be compressed; set federation.compress=none", f.Compress)
		}
	}
	e.checkDrop(c)
	e.Aggregation.Check(&Checker{prefix: "aggregation", c: c})
}

// checkDrop checks federation.client_drop_rate: in [0, 1), not with
// secure aggregation, and keeping at least one of the clients a round
// samples (when the number of clients is known).
func (e *Experiment) checkDrop(c *checker) {
	f := e.Federation
	const key = "federation.client_drop_rate"
	if !c.finite(key, f.ClientDropRate) || f.ClientDropRate == 0 {
		return
	}
	if f.ClientDropRate < 0 || f.ClientDropRate >= 1 {
		c.fail(key, "%v not in [0, 1)", f.ClientDropRate)
		return
	}
	if f.SecureAggregation {
		c.fail(key, "%v with federation.secure_aggregation: the secure sum would still hold the dropped sites' masked updates; use one or the other", f.ClientDropRate)
		return
	}
	n := f.Clients
	if f.Fraction > 0 && f.Fraction < 1 {
		n = min(n, max(1, int(f.Fraction*float64(n))))
	}
	if keep := int((1 - f.ClientDropRate) * float64(n)); n > 0 && keep < 1 {
		c.fail(key, "%v keeps ⌊(1−%v)·%d⌋ = 0 of the %d clients a round samples", f.ClientDropRate, f.ClientDropRate, n, n)
	}
}

// checkOptimizer checks the optimizer section against the federation's
// epochs.
func (e *Experiment) checkOptimizer(c *checker) {
	f := e.Federation
	o := e.Optimizer
	c.oneOf("optimizer.name", o.Name, OptimizerSGD, OptimizerAdamW)
	c.positive("optimizer.lr", o.LR)
	if c.finite("optimizer.momentum", o.Momentum) && (o.Momentum < 0 || o.Momentum >= 1) {
		c.fail("optimizer.momentum", "%v not in [0, 1)", o.Momentum)
	}
	if c.finite("optimizer.weight_decay", o.WeightDecay) && o.WeightDecay < 0 {
		c.fail("optimizer.weight_decay", "%v is negative", o.WeightDecay)
	}
	c.oneOf("optimizer.schedule", o.Schedule, ScheduleConstant, ScheduleCosine)
	c.atLeast("optimizer.warmup_epochs", o.WarmupEpochs, 0)
	if o.WarmupEpochs > 0 {
		total := f.Rounds * f.LocalEpochs
		switch {
		case o.Schedule != ScheduleCosine:
			c.fail("optimizer.warmup_epochs", "%d needs schedule: cosine", o.WarmupEpochs)
		case total > 0 && o.WarmupEpochs >= total:
			c.fail("optimizer.warmup_epochs", "%d is not below the %d training epochs (rounds × local_epochs)", o.WarmupEpochs, total)
		}
	}
}

// checkSeeds bounds the seeds and refuses a repeated one.
func (e *Experiment) checkSeeds(c *checker) {
	if len(e.Seeds) > MaxSeeds {
		c.fail("seeds", "%d seeds; at most %d (each seed repeats the whole run)", len(e.Seeds), MaxSeeds)
	}
	// linear: six million seeds once took hours here
	firstSeed := make(map[uint64]int, len(e.Seeds))
	for i, s := range e.Seeds {
		if j, dup := firstSeed[s]; dup {
			c.fail(fmt.Sprintf("seeds[%d]", i), "seed %d repeats seeds[%d]", s, j)
			continue
		}
		firstSeed[s] = i
	}
}

func (e *Experiment) checkDataset(c *checker) {
	d := e.Dataset
	switch {
	case d.Name == "":
		c.fail("dataset.name", "missing")
	case !datasetName.MatchString(d.Name):
		c.fail("dataset.name", "%q: want a registered name such as world, caltech101 or cifar10", d.Name)
	case d.Root == "" && !slices.Contains(rootOptional, d.Name):
		c.fail("dataset.root", "missing: dataset %s needs the DATA folder it lives under", d.Name)
	}
	c.between("dataset.shots", d.Shots, 0, MaxShots)
	c.between("dataset.image_size", d.ImageSize, 0, MaxImageSize)
	if d.NumClasses != 0 {
		c.between("dataset.num_classes", d.NumClasses, 2, MaxNumClasses)
	}
	seenDomain := make(map[string]bool, len(d.Domains))
	for i, dom := range d.Domains {
		p := fmt.Sprintf("dataset.domains[%d]", i)
		switch {
		case strings.TrimSpace(dom) == "":
			c.fail(p, "empty domain name")
		case seenDomain[dom]:
			c.fail(p, "%q listed twice", dom)
		}
		seenDomain[dom] = true
	}
	if c.finite("dataset.val_fraction", d.ValFraction) && (d.ValFraction < 0 || d.ValFraction >= 1) {
		c.fail("dataset.val_fraction", "%v not in [0, 1)", d.ValFraction)
	}
}

func (e *Experiment) checkProtocol(c *checker) {
	p := e.Protocol
	c.oneOf("protocol.name", p.Name, ProtocolBaseToNovel, ProtocolDirichlet, ProtocolDomains, ProtocolPathological, ProtocolNatural, ProtocolLODO, ProtocolDG)
	if p.HeldOut != "" && p.Name != ProtocolLODO && p.Name != ProtocolDG {
		c.fail("protocol.held_out", "%q: only %s and %s hold a domain out", p.HeldOut, ProtocolLODO, ProtocolDG)
	}
	c.between("protocol.min_samples", p.MinSamples, 0, MaxMinSamples)
	if c.finite("protocol.validation", p.Validation) && (p.Validation < 0 || p.Validation >= 1) {
		c.fail("protocol.validation", "%v not in [0, 1): the fraction of each client's training images held out for validation", p.Validation)
	}
	if p.BaseSet != "" {
		c.oneOf("protocol.base_set", p.BaseSet, "all", "others")
	}
	switch p.Name {
	case ProtocolBaseToNovel:
		// With a known class count, every client must get a base class.
		if n := e.Dataset.NumClasses; e.Dataset.Name == "world" && n >= 2 {
			if base := (n + 1) / 2; e.Federation.Clients > base {
				c.fail("federation.clients", "%d clients but only %d base classes (dataset.num_classes %d); base-to-novel deals each client at least one", e.Federation.Clients, base, n)
			}
		}
	case ProtocolDirichlet:
		c.positive("protocol.beta", p.Beta)
	case ProtocolLODO, ProtocolDG:
		if p.ClientsPerDomain > 1 {
			c.positive("protocol.beta", p.Beta)
		}
	case ProtocolDomains:
		c.positive("protocol.beta", p.Beta)
		c.between("protocol.clients_per_domain", p.ClientsPerDomain, 1, MaxPerDomain)
		if k := p.ClientsPerDomain; k >= 1 && e.Federation.Clients > 0 {
			if nd := len(e.Dataset.Domains); nd > 0 && e.Federation.Clients != nd*k {
				c.fail("federation.clients", "%d, but %d domains × clients_per_domain %d = %d (or set 0 to derive it)", e.Federation.Clients, nd, k, nd*k)
			} else if e.Federation.Clients%k != 0 {
				c.fail("federation.clients", "%d is not a multiple of clients_per_domain %d (or set 0 to derive it)", e.Federation.Clients, k)
			}
		}
	}
}

// NumClients returns the number of clients given the number of domains the
// loaded dataset has: federation.clients, or under the domains protocol
// with clients 0, numDomains × clients_per_domain.
func (e *Experiment) NumClients(numDomains int) int {
	if e.Protocol.Name == ProtocolDomains && e.Federation.Clients == 0 {
		return numDomains * e.Protocol.ClientsPerDomain
	}
	return e.Federation.Clients
}
