package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

// Section is one method's own settings: a pointer to a struct whose fields
// carry yaml tags, decoded with the same rules as the built-in sections
// (unknown keys, types and duplicates are errors naming the path). Methods
// register theirs with [RegisterSection]; the YAML key is the method name,
// e.g. "pfedmma: {dim: 32}" or --set pfedmma.dim=32.
type Section interface {
	// Check reports invalid settings through c; paths are relative to the
	// section ("dim", not "pfedmma.dim").
	Check(c *Checker)
}

var (
	sectionsMu sync.RWMutex
	sections   = map[string]func() Section{}
	methods    []string        // in registration order
	dropsLast  map[string]bool // methods whose authors' loader drops a partial last batch
)

// RegisterMethod makes name a method a config may list in methods, with
// its own section whose defaults come from defaults (called once per new
// Experiment; nil: the method has no settings). It panics when name is
// registered twice or collides with a built-in field: registration is
// program wiring, done from init functions (package methods does it).
func RegisterMethod(name string, defaults func() Section) {
	sectionsMu.Lock()
	defer sectionsMu.Unlock()
	if slices.Contains(methods, name) {
		panic("config: method " + name + " registered twice")
	}
	if _, builtin := fieldsOf(reflect.TypeFor[Experiment]())[name]; builtin {
		panic("config: method " + name + " collides with a built-in field")
	}
	methods = append(methods, name)
	if defaults == nil {
		return
	}
	if s := defaults(); reflect.TypeOf(s).Kind() != reflect.Pointer || reflect.TypeOf(s).Elem().Kind() != reflect.Struct {
		panic("config: section " + name + " must be a pointer to a struct")
	}
	sections[name] = defaults
}

// RegisterDropLast records what method name's authors' training loader does
// with an epoch's partial last batch (drops: it drops it when the client
// holds at least one full batch, as Dassl's loaders do): what
// train.drop_last auto does for that method. Package methods calls it
// beside RegisterMethod, from methods.Info.Loader.
func RegisterDropLast(name string, drops bool) {
	sectionsMu.Lock()
	defer sectionsMu.Unlock()
	if dropsLast == nil {
		dropsLast = map[string]bool{}
	}
	dropsLast[name] = drops
}

// DropLast says whether method trains with the partial last batch dropped
// in this experiment: train.drop_last true or false for every method, auto
// as the method's authors' loader (RegisterDropLast; false for a method
// that declared nothing).
func (e *Experiment) DropLast(method string) bool {
	switch e.Train.DropLast {
	case DropLastTrue:
		return true
	case DropLastAuto:
		sectionsMu.RLock()
		defer sectionsMu.RUnlock()
		return dropsLast[method]
	}
	return false
}

// Methods lists the registered method names, sorted: registration runs
// in package initialisation order, which moves with the import graph (a
// method package importing one whose path sorts after methods/zeroshot
// initialises after it), so the order is not the registration order.
func Methods() []string {
	sectionsMu.RLock()
	defer sectionsMu.RUnlock()
	out := slices.Clone(methods)
	slices.Sort(out)
	return out
}

// defaultSections returns fresh defaults of every registered section.
func defaultSections() map[string]Section {
	sectionsMu.RLock()
	defer sectionsMu.RUnlock()
	out := make(map[string]Section, len(sections))
	for name, mk := range sections {
		out[name] = mk()
	}
	return out
}

// Section returns the experiment's settings of a registered method (nil
// when the method has none or is not registered).
func (e *Experiment) Section(name string) Section {
	return e.Sections[name]
}

// cloneSections deep-copies sections (their structs are copied by value;
// slices inside them are copied too).
func cloneSections(in map[string]Section) map[string]Section {
	if in == nil {
		return nil
	}
	out := make(map[string]Section, len(in))
	for k, s := range in {
		v := reflect.ValueOf(s).Elem()
		c := reflect.New(v.Type())
		c.Elem().Set(v)
		for i := range v.NumField() {
			if f := c.Elem().Field(i); f.Kind() == reflect.Slice && !f.IsNil() && f.CanSet() {
				f.Set(reflect.AppendSlice(reflect.MakeSlice(f.Type(), 0, f.Len()), f))
			}
		}
		out[k] = c.Interface().(Section)
	}
	return out
}

// Checker collects the problems of a section's settings, each naming its
// field path.
type Checker struct {
	prefix string
	c      *checker
	// bounds, when set, records the documented range of every numeric
	// setting checked (Bounds).
	bounds map[string]*Bound
}

// Bound is the documented range of one numeric setting, as its section's
// Check enforces it: Min (Max) is set when there is a lower (upper) bound;
// MinOpen (MaxOpen) when the bound itself is excluded (Positive: > 0;
// Below: < hi). Int is set for integer settings.
type Bound struct {
	Path     string
	Min, Max *float64
	MinOpen  bool
	MaxOpen  bool
	Int      bool
}

func (k *Checker) record(path string, int bool, lo, hi *float64, open bool) {
	k.recordMax(path, int, lo, hi, open, false)
}

func (k *Checker) recordMax(path string, int bool, lo, hi *float64, open, maxOpen bool) {
	if k.bounds == nil {
		return
	}
	b := k.bounds[path]
	if b == nil {
		b = &Bound{Path: path}
		k.bounds[path] = b
	}
	b.Int = b.Int || int
	if lo != nil && (b.Min == nil || *lo > *b.Min || (*lo == *b.Min && open)) {
		b.Min, b.MinOpen = lo, open
	}
	if hi != nil && (b.Max == nil || *hi < *b.Max || (*hi == *b.Max && maxOpen)) {
		b.Max, b.MaxOpen = hi, maxOpen
	}
}

func fp(v float64) *float64 { return &v }

// Bounds runs sec's Check on its current values and returns the documented
// range of every numeric setting it checks (paths relative to the section),
// sorted by path; the conformance suite runs each setting at both ends.
func Bounds(sec Section) []Bound {
	k := &Checker{c: &checker{}, bounds: map[string]*Bound{}}
	sec.Check(k)
	out := make([]Bound, 0, len(k.bounds))
	for _, p := range slices.Sorted(maps.Keys(k.bounds)) {
		out = append(out, *k.bounds[p])
	}
	return out
}

// Fail reports a problem with field path.
func (k *Checker) Fail(path, format string, args ...any) {
	k.c.fail(joinPath(k.prefix, path), format, args...)
}

// AtLeast rejects v < lo.
func (k *Checker) AtLeast(path string, v, lo int) {
	k.record(path, true, fp(float64(lo)), nil, false)
	k.c.atLeast(joinPath(k.prefix, path), v, lo)
}

// AtMost rejects v > hi.
func (k *Checker) AtMost(path string, v, hi int) {
	k.record(path, true, nil, fp(float64(hi)), false)
	if v > hi {
		k.Fail(path, "%d is above %d", v, hi)
	}
}

// Positive rejects v ≤ 0, NaN and ±Inf.
func (k *Checker) Positive(path string, v float64) {
	k.record(path, false, fp(0), nil, true)
	k.c.positive(joinPath(k.prefix, path), v)
}

// NonNegative rejects v < 0, NaN and ±Inf.
func (k *Checker) NonNegative(path string, v float64) {
	k.record(path, false, fp(0), nil, false)
	if k.Finite(path, v) && v < 0 {
		k.Fail(path, "%v is negative", v)
	}
}

// Below rejects v ≥ hi, NaN and ±Inf.
func (k *Checker) Below(path string, v, hi float64) {
	k.recordMax(path, false, nil, fp(hi), false, true)
	if k.Finite(path, v) && v >= hi {
		k.Fail(path, "%v must be below %v", v, hi)
	}
}

// Finite rejects NaN and ±Inf and reports whether v is finite.
func (k *Checker) Finite(path string, v float64) bool {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		k.Fail(path, "%v is not a finite number", v)
		return false
	}
	return true
}

// Range rejects v outside [lo, hi].
func (k *Checker) Range(path string, v, lo, hi float64) {
	k.record(path, false, fp(lo), fp(hi), false)
	if k.Finite(path, v) && (v < lo || v > hi) {
		k.Fail(path, "%v not in [%v, %v]", v, lo, hi)
	}
}

// OneOf rejects v not in allowed.
func (k *Checker) OneOf(path, v string, allowed ...string) {
	k.c.oneOf(joinPath(k.prefix, path), v, allowed...)
}

// checkSections runs every section's Check.
func (e *Experiment) checkSections(c *checker) {
	for _, name := range slices.Sorted(maps.Keys(e.Sections)) {
		e.Sections[name].Check(&Checker{prefix: name, c: c})
	}
}

// setSection applies a preset's override to a method section; presets name
// settings of methods that may not be linked into the program, so an
// unregistered section is skipped.
func (e *Experiment) setSection(path, value string) {
	name, _, _ := strings.Cut(path, ".")
	if e.Sections[name] == nil {
		return
	}
	if err := e.Set(path, value); err != nil {
		panic("config: preset override " + path + "=" + value + ": " + err.Error())
	}
}

// sectionNode encodes the sections for the resolved YAML.
func (e *Experiment) sectionNodes() ([]*yaml.Node, error) {
	var out []*yaml.Node
	for _, name := range slices.Sorted(maps.Keys(e.Sections)) {
		var n yaml.Node
		if err := n.Encode(e.Sections[name]); err != nil {
			return nil, fmt.Errorf("section %s: %w", name, err)
		}
		out = append(out, &yaml.Node{Kind: yaml.ScalarNode, Value: name}, &n)
	}
	return out, nil
}

// MarshalYAML writes the built-in fields followed by the method sections.
func (e Experiment) MarshalYAML() (any, error) {
	type plain Experiment
	var n yaml.Node
	if err := n.Encode(plain(e)); err != nil {
		return nil, err
	}
	extra, err := e.sectionNodes()
	if err != nil {
		return nil, err
	}
	n.Content = append(n.Content, extra...)
	return &n, nil
}

// ModelFitter is a section whose settings depend on the model's depth
// (pFedMMA's adapted blocks): FitModel adjusts them to a model with layers
// blocks per tower and says what it changed ("pfedmma.start 10 → -1").
type ModelFitter interface {
	FitModel(layers int) []string
}

// FitModel adjusts every method section to a model with layers blocks and
// returns what changed (for `--model embedded` with a paper preset).
func (e *Experiment) FitModel(layers int) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(e.Sections)) {
		if f, ok := e.Sections[name].(ModelFitter); ok {
			for _, c := range f.FitModel(layers) {
				out = append(out, name+"."+c)
			}
		}
	}
	return out
}

// CheckSection validates one method's settings outside a configuration
// file (settings read from a fixture's metadata, say): nil, or every
// problem, each naming its field path under name.
func CheckSection(name string, s Section) error {
	c := &checker{}
	s.Check(&Checker{prefix: name, c: c})
	errs := make([]error, len(c.errs))
	for i, e := range c.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}
