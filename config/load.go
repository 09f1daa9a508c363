package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/pfedmma/pfedmma/internal/inputfile"
	"gopkg.in/yaml.v3"
)

// ErrInvalid matches (errors.Is) every configuration error about a field:
// unknown, wrongly typed or out of range.
var ErrInvalid = errors.New("invalid config")

// FieldError is one bad setting. Its message reads
// "FILE: line N: PATH: problem (value from SOURCE)", leaving out what is unknown.
type FieldError struct {
	// File is the config file the value came from; "" when it did not
	// come from a file.
	File string
	// Line is the 1-based line of the setting in File; 0 when unknown.
	Line int
	// Path is the field path, e.g. "federation.fraction" or "methods[1]".
	Path string
	// From names where a value not read from File came from, e.g.
	// "preset paper-cifar" or "--set federation.rounds=0"; may be empty.
	From string
	// Err is the problem.
	Err error
}

// Error implements error.
func (e *FieldError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File + ": ")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Err.Error())
	if e.From != "" {
		fmt.Fprintf(&b, " (value from %s)", e.From)
	}
	return b.String()
}

// Unwrap returns the underlying problem.
func (e *FieldError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrInvalid].
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// Sources names where an experiment's settings come from, lowest priority
// first.
type Sources struct {
	// Preset is the base preset; empty means [DefaultPreset].
	Preset string
	// File is the YAML config file; empty means none.
	File string
	// Data, when non-nil, is the file's content (File then only names it in
	// errors).
	Data []byte
	// Sets are "path=value" overrides applied in order (see
	// [Experiment.Set]).
	Sets []string
}

// MaxFileBytes bounds the size of a configuration file.
const MaxFileBytes = 1 << 20

// Load reads a config file onto the [DefaultPreset] and validates it. It is
// Compose(Sources{File: path}).
func Load(path string) (*Experiment, error) {
	return Compose(Sources{File: path})
}

// Compose builds an experiment from a preset, a YAML file decoded onto it
// (only the fields the file sets change), and --set overrides, then
// validates it. Errors name the file, line and field path of each bad
// setting, or the preset or override it came from; all problems found are
// reported together (errors.Join).
func Compose(s Sources) (*Experiment, error) {
	presetName := s.Preset
	if presetName == "" {
		presetName = DefaultPreset
	}
	e, err := Preset(presetName)
	if err != nil {
		return nil, err
	}
	presetDataset := e.Dataset.Name
	var lines map[string]int
	if s.File != "" || s.Data != nil {
		data := s.Data
		if data == nil {
			if data, err = inputfile.ReadFile(s.File); err != nil {
				return nil, fmt.Errorf("config: %w", err)
			}
		}
		if len(data) > MaxFileBytes {
			// a 47 MB list of seeds once took minutes and GiBs to parse
			return nil, fmt.Errorf("config %s: %d bytes; a configuration is at most %d bytes (real ones are a few KB)", cmp.Or(s.File, "data"), len(data), MaxFileBytes)
		}
		name := s.File
		if name == "" {
			name = "config"
		}
		if lines, err = e.decodeFile(name, data); err != nil {
			return nil, err
		}
		e.keepOldDropLast(data, lines)
	}
	setFrom := map[string]string{}
	for _, kv := range s.Sets {
		path, value, err := ParseSet(kv)
		if err != nil {
			return nil, err
		}
		if err := e.Set(path, value); err != nil {
			return nil, err
		}
		setFrom[path] = "--set " + kv
	}
	e.dropPresetDomains(presetDataset, lines, setFrom)
	if e.Federation.Compress == "none" {
		e.Federation.Compress = "" // the same run as no federation.compress
	}
	fes := e.check()
	if len(fes) == 0 {
		return e, nil
	}
	errs := make([]error, len(fes))
	for i, fe := range fes {
		switch from, ok := setOrigin(setFrom, fe.Path); {
		case ok:
			fe.From = from
		case lineOf(lines, fe.Path) > 0:
			fe.File, fe.Line = s.File, lineOf(lines, fe.Path)
			if fe.File == "" {
				fe.File = "config"
			}
		default:
			fe.From = "preset " + presetName
			if s.File != "" {
				fe.File = s.File
			}
		}
		errs[i] = fe
	}
	return nil, errors.Join(errs...)
}

// keepOldDropLast reads a resolved config (a run folder's config.yaml, a
// federation's task) written before train.drop_last existed as the run it
// was: every epoch kept its partial last batch (train.drop_last false), not
// the later default auto. A resolved config sets every field, so one
// without the key predates it.
func (e *Experiment) keepOldDropLast(data []byte, lines map[string]int) {
	resolved := bytes.HasPrefix(data, []byte(resolvedHeader)) || bytes.HasPrefix(data, []byte(taskHeader))
	if _, set := lines["train.drop_last"]; resolved && !set {
		e.Train.DropLast = DropLastFalse
	}
}

// dropPresetDomains forgets the preset's dataset.domains when a later layer
// chose another dataset without naming domains: the preset's domains are
// those of its own dataset (paper-domainnet's six DomainNet domains mean
// nothing to office_caltech10), so the new dataset gets all of its own.
func (e *Experiment) dropPresetDomains(presetDataset string, lines map[string]int, sets map[string]string) {
	if e.Dataset.Name == presetDataset {
		return
	}
	for p := range lines {
		if p == "dataset.domains" || strings.HasPrefix(p, "dataset.domains[") {
			return
		}
	}
	for p := range sets {
		if p == "dataset" || p == "dataset.domains" || strings.HasPrefix(p, "dataset.domains[") {
			return
		}
	}
	e.Dataset.Domains = nil
}

// setOrigin finds the --set override that last wrote path (or a section
// containing it).
func setOrigin(sets map[string]string, path string) (string, bool) {
	for p := path; p != ""; p = parentPath(p) {
		if from, ok := sets[p]; ok {
			return from, true
		}
	}
	return "", false
}

// lineOf is the file line of path; a list element falls back to its list.
func lineOf(lines map[string]int, path string) int {
	if l, ok := lines[path]; ok {
		return l
	}
	if i := strings.LastIndexByte(path, '['); i > 0 && strings.HasSuffix(path, "]") {
		return lines[path[:i]]
	}
	return 0
}

// parentPath strips the last component: "a.b[2]" → "a.b", "a.b" → "a".
func parentPath(p string) string {
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndexByte(p, '['); i >= 0 {
			return p[:i]
		}
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return ""
}

// decodeFile decodes one YAML document onto e, strictly: unknown or
// duplicate keys and wrongly typed values are errors. It returns the line
// of every field path the file sets.
func (e *Experiment) decodeFile(name string, data []byte) (map[string]int, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return map[string]int{}, nil // an empty file changes nothing
		}
		return nil, fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
		}
		return nil, fmt.Errorf("%s: line %d: a second YAML document; a config file holds one", name, extra.Line)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if isNull(root) {
		return map[string]int{}, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, &FieldError{File: name, Line: root.Line, Err: fmt.Errorf("want a mapping of settings (method, dataset, ...), got %s", kindName(root))}
	}
	tmp := e.Clone() // decode onto a copy so a failed decode leaves e intact
	d := &decoder{file: name, lines: map[string]int{}, sections: tmp.Sections}
	d.value(reflect.ValueOf(tmp).Elem(), root, "", root.Line)
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	*e = *tmp
	return d.lines, nil
}

// ParseSet splits a "path=value" override, e.g. "federation.rounds=3".
func ParseSet(kv string) (path, value string, err error) {
	path, value, ok := strings.Cut(kv, "=")
	path = strings.TrimSpace(path)
	if !ok || path == "" {
		return "", "", fmt.Errorf("--set %q: want path=value, e.g. federation.rounds=3", kv)
	}
	return path, value, nil
}

// Set overrides one field, named by its YAML path ("federation.rounds",
// "augment", "pfedmma.scale"); value is YAML ("3", "0.005", "views:4",
// "[zeroshot, pfedmma]", "{rounds: 3, clients: 5}" for a whole section).
// An empty value clears a string or a list. Set checks the type, not the
// range: call [Experiment.Validate] afterwards.
func (e *Experiment) Set(path, value string) error {
	from := "--set " + path + "=" + value
	keys := strings.Split(path, ".")
	v := reflect.ValueOf(e).Elem()
	section := ""
	if sec := e.Sections[keys[0]]; sec != nil {
		section = keys[0]
		v, keys = reflect.ValueOf(sec).Elem(), keys[1:]
	}
	for _, key := range keys {
		if v.Kind() != reflect.Struct || isLeafType(v.Type()) {
			return &FieldError{Path: path, From: from, Err: fmt.Errorf("%q is not a section", parentPath(path))}
		}
		f, ok := fieldsOf(v.Type())[key]
		if !ok {
			return &FieldError{Path: path, From: from, Err: unknownField(key, v.Type())}
		}
		v = v.Field(f)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(value), &doc); err != nil {
		return &FieldError{Path: path, From: from, Err: fmt.Errorf("value: %s", strings.TrimPrefix(err.Error(), "yaml: "))}
	}
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		n = doc.Content[0]
	}
	tmp := e.Clone()
	tv := reflect.ValueOf(tmp).Elem()
	if section != "" {
		tv = reflect.ValueOf(tmp.Sections[section]).Elem()
	}
	for _, key := range keys {
		tv = tv.Field(fieldsOf(tv.Type())[key])
	}
	d := &decoder{lines: map[string]int{}, sections: tmp.Sections}
	d.value(tv, n, path, 0)
	if len(d.errs) > 0 {
		for _, err := range d.errs {
			var fe *FieldError
			if errors.As(err, &fe) {
				fe.Line, fe.From = 0, from
			}
		}
		return errors.Join(d.errs...)
	}
	*e = *tmp
	return nil
}

// decoder walks a YAML node tree alongside the Experiment struct. Unlike
// yaml.v3's Decoder.KnownFields it reports the full field path of unknown
// keys, rejects duplicate keys, refuses to truncate 1.5 into an int field
// or to read null into a number, and reports every problem, not the first.
type decoder struct {
	file     string
	lines    map[string]int
	errs     []error
	sections map[string]Section // method sections, read at the top level
}

func (d *decoder) fail(line int, path string, format string, args ...any) {
	d.errs = append(d.errs, &FieldError{File: d.file, Line: line, Path: path, Err: fmt.Errorf(format, args...)})
}

// value decodes n into v; line is the line of n's key.
func (d *decoder) value(v reflect.Value, n *yaml.Node, path string, line int) {
	for depth := 0; n.Kind == yaml.AliasNode; depth++ {
		if depth > 16 || n.Alias == nil {
			d.fail(line, path, "alias chain too deep")
			return
		}
		n = n.Alias
	}
	if path != "" {
		d.lines[path] = line
	}
	switch {
	case v.Kind() == reflect.Struct && !isLeafType(v.Type()):
		d.structure(v, n, path)
	case v.Kind() == reflect.Slice:
		d.sequence(v, n, path, line)
	default:
		d.scalar(v, n, path, line)
	}
}

func (d *decoder) structure(v reflect.Value, n *yaml.Node, path string) {
	if isNull(n) {
		return // "section:" with nothing under it changes nothing
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n.Line, path, "want a mapping of %s, got %s", strings.Join(fieldNames(v.Type()), ", "), kindName(n))
		return
	}
	fields := fieldsOf(v.Type())
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.fail(k.Line, path, "a key must be a plain name, got %s", kindName(k))
			continue
		}
		p := joinPath(path, k.Value)
		if first, dup := seen[k.Value]; dup {
			d.fail(k.Line, p, "set twice (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		f, ok := fields[k.Value]
		if sec := d.sections[k.Value]; !ok && path == "" && sec != nil {
			d.value(reflect.ValueOf(sec).Elem(), val, p, k.Line)
			continue
		}
		if !ok {
			d.errs = append(d.errs, &FieldError{File: d.file, Line: k.Line, Path: p, Err: unknownField(k.Value, v.Type())})
			continue
		}
		d.value(v.Field(f), val, p, k.Line)
	}
}

func (d *decoder) sequence(v reflect.Value, n *yaml.Node, path string, line int) {
	if isNull(n) {
		v.Set(reflect.Zero(v.Type()))
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(line, path, "want a list such as [a, b], got %s", kindName(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		d.value(s.Index(i), item, fmt.Sprintf("%s[%d]", path, i), item.Line)
	}
	v.Set(s)
}

func (d *decoder) scalar(v reflect.Value, n *yaml.Node, path string, line int) {
	if u, ok := v.Addr().Interface().(yaml.Unmarshaler); ok {
		if err := u.UnmarshalYAML(n); err != nil {
			d.fail(line, path, "%v", err)
		}
		return
	}
	if isNull(n) {
		if v.Kind() == reflect.String {
			v.SetString("")
			return
		}
		d.fail(line, path, "no value; want %s (leave the key out to keep the default)", typeName(v.Type()))
		return
	}
	if n.Kind != yaml.ScalarNode {
		d.fail(line, path, "want %s, got %s", typeName(v.Type()), kindName(n))
		return
	}
	tag := n.ShortTag()
	var ok bool
	switch v.Kind() {
	case reflect.Int, reflect.Int64, reflect.Uint64:
		ok = tag == "!!int"
	case reflect.Float64:
		ok = tag == "!!int" || tag == "!!float"
	case reflect.Bool:
		ok = tag == "!!bool"
	case reflect.String:
		ok = true // keep the text as written, e.g. a numeric folder name
	}
	if ok {
		if v.Kind() == reflect.String {
			v.SetString(n.Value)
			return
		}
		if err := n.Decode(v.Addr().Interface()); err == nil {
			return
		}
	}
	d.fail(line, path, "cannot use %s as %s", quoteScalar(n), typeName(v.Type()))
}

// isLeafType reports struct types decoded as one scalar (Augment).
func isLeafType(t reflect.Type) bool {
	return reflect.PointerTo(t).Implements(reflect.TypeFor[yaml.Unmarshaler]())
}

func isNull(n *yaml.Node) bool {
	return n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// fieldsOf maps the YAML names of a struct's fields to field indexes.
func fieldsOf(t reflect.Type) map[string]int {
	m := map[string]int{}
	for i := range t.NumField() {
		if name := yamlName(t.Field(i)); name != "" {
			m[name] = i
		}
	}
	return m
}

// fieldNames lists a struct's YAML names in declaration order.
func fieldNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		if name := yamlName(t.Field(i)); name != "" {
			names = append(names, name)
		}
	}
	return names
}

func yamlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

// unknownField explains an unknown key, suggesting the closest known one.
func unknownField(key string, t reflect.Type) error {
	names := fieldNames(t)
	best, bestD := "", 3
	for _, n := range names {
		if dd := editDistance(key, n); dd < bestD {
			best, bestD = n, dd
		}
	}
	if best != "" {
		return fmt.Errorf("unknown field; did you mean %q? (known: %s)", best, strings.Join(names, ", "))
	}
	return fmt.Errorf("unknown field (known: %s)", strings.Join(names, ", "))
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list of " + strings.TrimPrefix(strings.TrimPrefix(typeName(t.Elem()), "an "), "a ") + "s"
	case reflect.Struct:
		return "a mapping of " + strings.Join(fieldNames(t), ", ")
	}
	return t.String()
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return quoteScalar(n)
	}
	return "nothing"
}

func quoteScalar(n *yaml.Node) string {
	switch n.ShortTag() {
	case "!!str":
		return fmt.Sprintf("%q", n.Value)
	case "!!null":
		return "null"
	}
	return n.Value
}
